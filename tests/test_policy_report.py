"""Policy violations from engine events, attributed per model in the `--json` summary.

Events are built the way the engine sends them (pkg/engine/events.go policyViolationEvent: colour
codes around "<policy description>\\n<message>", the level, the resource URN); the messages come from
the guardrails' own formatter, so the two sides of the prefix contract are tested together.
"""

from __future__ import annotations

from pathlib import Path

from pulumi.automation import events

from policy.guardrails.base import violation
from tkf_infra.ops import policy_report as pr
from tkf_infra.ops.summary import RunTracker, summarize

STACK_URN = "urn:pulumi:dev::tkf-infra::pulumi:pulumi:Stack::tkf-infra-dev"
SERVING = "urn:pulumi:dev::tkf-infra::tkf:serving:ModelServing::{m}"
WORKLOAD = "urn:pulumi:dev::tkf-infra::tkf:serving:ModelServing$kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService::{m}-llmisvc"  # noqa: E501
PVC = "urn:pulumi:dev::tkf-infra::tkf:serving:WeightCache$kubernetes:core/v1:PersistentVolumeClaim::weights-x-pvc"


def policy_event(policy: str, level: str, message: str, urn: str | None) -> events.EngineEvent:
    text = f"<{{%fg 12%}}>Model servers run only on allowed pools.\n{message}<{{%reset%}}>\n"
    event = events.PolicyEvent(message=text, color="raw", policy_name=policy, policy_pack_name="tkf-guardrails",
                               policy_pack_version="0.1.0", policy_pack_version_tag="", enforcement_level=level,
                               resource_urn=urn)
    return events.EngineEvent(sequence=1, timestamp=0, policy_event=event)


def tracker_with(*models: str) -> RunTracker:
    t = RunTracker("preview")
    for m in models:
        t.parents[WORKLOAD.format(m=m)] = SERVING.format(m=m)
        t.parents[SERVING.format(m=m)] = STACK_URN
        t.report(m).ops["create"] += 1
    return t


def test_the_guardrail_prefix_is_what_attribution_reads() -> None:
    one = violation(["qwen-gpu"], "LLMInferenceService llm-serving/qwen-gpu", "runs on pool 'h100'", "use cpu")
    many = violation(["b-model", "a-model"], "PersistentVolumeClaim llm-serving/w", "not protected", "protect it")
    got = [pr.from_event(policy_event("p", "mandatory", v.message, WORKLOAD.format(m="x")).policy_event)  # type: ignore[arg-type]
           for v in (one, many)]
    assert got[0].models == ("qwen-gpu",)
    assert got[0].text == one.message, "description line and colour codes are stripped"
    assert got[1].models == ("a-model", "b-model")


def test_mandatory_violation_fails_its_model_and_excludes_its_serving_component() -> None:
    tracker = tracker_with("qwen-gpu", "qwen-0-5b")
    collector = pr.PolicyCollector()
    msg = violation(["qwen-gpu"], "LLMInferenceService llm-serving/qwen-gpu", "takes 2 GPUs; the default ceiling "
                    "(defaultMaxGpus) is 0", "lower gpusPerNode").message
    collector(policy_event("model-gpu-ceiling", "mandatory", msg, WORKLOAD.format(m="qwen-gpu")))
    collector(policy_event("model-gpu-ceiling", "mandatory", msg, WORKLOAD.format(m="qwen-gpu")))  # repeated event
    collector.record(tracker)
    summary = collector.annotate(summarize("dev", "preview", tracker, ok=False))
    assert summary["failedModels"] == ["qwen-gpu"]
    bad = summary["models"]["qwen-gpu"]
    assert bad["status"] == "failed"
    assert bad["reasons"] == [f"policy model-gpu-ceiling (mandatory): {msg}"]
    assert bad["policy"] == [{"policy": "model-gpu-ceiling", "level": "mandatory", "message": msg}]
    assert summary["models"]["qwen-0-5b"]["status"] == "created"
    # the up after this preview leaves out the whole model (its ModelServing and, as dependents, its children)
    assert tracker.report("qwen-gpu").failed_urns == {SERVING.format(m="qwen-gpu")}


def test_advisory_violation_is_a_warning_and_the_model_goes_through() -> None:
    tracker = tracker_with("qwen-0-5b")
    collector = pr.PolicyCollector()
    msg = violation(
        ["qwen-0-5b"],
        "LLMInferenceService llm-serving/qwen-0-5b container 'main'",
        "runs vLLM 'v0.11.0', but this stack is pinned to vLLM 'v0.12.0'",
        "set serving.vllmImage",
    ).message
    collector(policy_event("approved-images", "advisory", msg, WORKLOAD.format(m="qwen-0-5b")))
    collector.record(tracker)
    summary = collector.annotate(summarize("dev", "preview", tracker, ok=True))
    assert summary["ok"] is True and summary["failedModels"] == []
    model = summary["models"]["qwen-0-5b"]
    assert model["status"] == "created"
    assert model["warnings"] == [f"policy approved-images (advisory): {msg}"]
    assert not tracker.report("qwen-0-5b").failed_urns


def test_weight_cache_violation_fails_every_model_served_from_it() -> None:
    tracker = tracker_with("a-model", "b-model")
    collector = pr.PolicyCollector()
    msg = violation(["a-model", "b-model"], "PersistentVolumeClaim llm-serving/weights-x", "not protected",
                    "set serving.protect: true").message
    collector(policy_event("weight-cache-protected", "mandatory", msg, PVC))
    collector.record(tracker)
    assert tracker.report("a-model").failed_urns == tracker.report("b-model").failed_urns == {PVC}
    summary = summarize("dev", "preview", tracker, ok=False)
    assert summary["failedModels"] == ["a-model", "b-model"]


def test_stack_level_violation_is_a_stack_error_or_warning() -> None:
    tracker = tracker_with("a-model")
    collector = pr.PolicyCollector()
    msg = violation(["a-model"], "fleet", "the models take 40 GPUs in total (a-model 40); the stack's budget is 32",
                    "remove or shrink models").message
    # the engine reports a violation without a resource against the root stack (step_generator.go)
    collector(policy_event("fleet-budget", "mandatory", msg, STACK_URN))
    collector(policy_event("fleet-budget", "advisory", msg.replace("40", "33"), None))
    collector.record(tracker)
    summary = collector.annotate(summarize("dev", "preview", tracker, ok=False))
    assert summary["errors"] == [f"policy fleet-budget (mandatory): {msg}"]
    assert summary["policyWarnings"] == [f"policy fleet-budget (advisory): {msg.replace('40', '33')}"]
    assert summary["models"]["a-model"]["status"] == "created", "a fleet total names no single culprit"


def test_a_stack_runs_the_pack_only_with_a_config_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "dev.json").write_text("{}")
    expected = pr.PackArgs([str(tmp_path / "analyzer")], [str(tmp_path / "config" / "dev.json")])
    assert pr.policy_args("dev", tmp_path) == expected
    assert pr.policy_args("staging", tmp_path) == pr.PackArgs()
    assert pr.PolicyCollector.for_run("dev", "refresh", tmp_path).pack == pr.PackArgs(), "only preview and up"
    committed = {p.stem for p in (pr.PACK_DIR / "config").glob("*.json")}
    stack_files = {p.name.split(".")[1] for p in pr.PACK_DIR.parent.glob("Pulumi.*.yaml")}
    assert committed == stack_files, "every committed stack has the owner's limits, and no stray config"
