"""tkf-infra: a Pulumi program that stands up and checks a shared LLM inference fleet."""
