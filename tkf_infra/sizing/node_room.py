"""What one node gives pods (its allocatable), and what an EKS node keeps for itself.

Why: the node capacity check packs every replica's CPU and host-memory requests onto the pool's
nodes, so each node needs its allocatable as plain numbers. A Node object reports it
(`status.allocatable`); an EKS node that does not exist yet is derived from its instance type the
way the EKS AMI's nodeadm sets the kubelet up (amazon-eks-ami @ tag v20260724):

- max pods = ENIs of the default network card x (IPv4 addresses per ENI - 1) + 2
  (nodeadm/internal/kubelet/eni_max_pods.go, calculateStandardMaxPods; 110 when unknown, defaultMaxPods);
- kube-reserved memory = 11 MiB x max pods + 255 MiB (nodeadm/internal/kubelet/config.go,
  getMemoryMebibytesToReserve);
- kube-reserved CPU = 6 % of the first core, 1 % of the second, 0.5 % of the third and fourth,
  0.25 % of every core above four (same file, getCPUMillicoresToReserve: ranges 0/1000/2000/4000 m,
  600/100/50/25 hundredths of a percent);
- kube-reserved ephemeral storage 1 GiB (same file, withDefaultReservedResources);
- hard eviction threshold memory.available 100 MiB (same file, the default EvictionHard).

allocatable = capacity - kube-reserved - eviction threshold (no system-reserved is set by nodeadm).
"""

from __future__ import annotations

from dataclasses import dataclass

EKS_AMI_TAG = "v20260724"
DEFAULT_MAX_PODS = 110
EVICTION_MEMORY_MIB = 100


@dataclass(frozen=True)
class NodeRoom:
    """One node as the packing sees it: what it can give pods (GPUs as the device plugin advertises them)."""

    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int
    ephemeral_mib: int | None = None
    """None: not known (pods here ask for none, so it is reported, not packed)."""
    pods: int | None = None


def eks_max_pods(default_max_enis: int, ipv4_per_eni: int) -> int:
    if default_max_enis <= 0 or ipv4_per_eni <= 0:
        return DEFAULT_MAX_PODS
    return default_max_enis * (ipv4_per_eni - 1) + 2


def eks_reserved_cpu_millis(vcpus: int) -> int:
    total = vcpus * 1000
    ranges = (0, 1000, 2000, 4000, total)
    per_10000 = (600, 100, 50, 25)
    reserved = 0
    for i, pct in enumerate(per_10000):
        start, end = ranges[i], ranges[i + 1]
        if total > start:
            reserved += (min(total, end) - start) * pct // 10000
    return reserved


def eks_reserved_memory_mib(max_pods: int) -> int:
    return 11 * max_pods + 255


def eks_node_room(name: str, vcpus: int, memory_mib: int, gpus: int, default_max_enis: int,
                  ipv4_per_eni: int) -> NodeRoom:
    """Allocatable of an EKS AMI node of an instance type (see the module docstring for the formula)."""
    pods = eks_max_pods(default_max_enis, ipv4_per_eni)
    return NodeRoom(name, vcpus * 1000 - eks_reserved_cpu_millis(vcpus),
                    memory_mib - eks_reserved_memory_mib(pods) - EVICTION_MEMORY_MIB, gpus, None, pods)
