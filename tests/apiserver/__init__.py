"""The program through the Automation API against a real kube-apiserver (tests/kube)."""
