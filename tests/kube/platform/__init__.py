"""The platform from its charts and the program through the Automation API, against a kube-apiserver of their
own (conftest.py says why not the session's)."""
