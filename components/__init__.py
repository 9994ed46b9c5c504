"""Pulumi ComponentResources of the fleet: platform and one ModelServing per catalog entry."""
