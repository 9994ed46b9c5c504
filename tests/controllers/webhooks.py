"""Every admission webhook the platform's charts register, served for real on the test server.

A chart registers its webhooks by Service reference (``clientConfig.service``) and leaves ``caBundle`` to
cert-manager's cainjector. The harness stands in for the two things a cluster adds, nothing else:

- the network: ``tkf-kube-apiserver --webhook-service NS/NAME=127.0.0.1:PORT`` resolves each webhook
  Service to the local manager process that serves it (tools/kube-apiserver/webhooks.go); PORT is
  reserved (tests/ports.py) from before the API server starts until the test ends, since the manager
  binds it only later, mid-`up`; the TLS server
  name stays ``NAME.NS.svc``, so the serving certificate the harness signs names exactly that;
- the cainjector: ``--webhook-ca-file`` makes the server trust the harness's CA for configurations
  without a ``caBundle`` (as controller-runtime's envtest generates a CA and serving certificates).

The (Validating|Mutating)WebhookConfigurations and the CRDs' conversion webhooks are the charts' own, as
Pulumi applies them: which Services they name is read from the vendored charts here, and a webhook Service
no manager serves fails `webhook_servers` (a new chart version adding one must be served, not ignored).

cert-manager's own webhook cannot be built from the Go module proxy (its cmd/webhook is a module the proxy
does not serve), so this tier marks cert-manager ``alreadyInstalled`` and applies its CRDs (which KServe's
chart's Issuer and Certificate need) from the vendored chart, as a cluster someone else set up has them.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from components.platform_charts import VENDORED, VENDORED_FOLDERS
from tests.kube.client import KubeClient
from tests.ports import Reservation, reserve
from tkf_infra.config.charts import LWS_NAMESPACE, VENDORED_CHARTS

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: What Helm renders for cert-manager's CRD labels with release name `cert-manager` (the
#: `cert-manager.crd-labels` helper, less the chart-version labels nothing here reads). The chart's
#: templates/crd-*.yaml have no other template directive than whole-line ones (the `crds.enabled` guard,
#: the `crds.keep` annotation guard, the labels include); `cert_manager_crds` checks that.
CERT_MANAGER_LABELS = {"app": "cert-manager", "app.kubernetes.io/name": "cert-manager",
                       "app.kubernetes.io/instance": "cert-manager", "app.kubernetes.io/component": "crds"}
#: A line that is only a template directive: `{{- if ... }}`, `{{- end }}`, `{{- include ... }}`.
_DIRECTIVE_LINE = re.compile(r"^\s*\{\{.*\}\}\s*$")


def _chart(key: str) -> Path:
    return VENDORED / VENDORED_FOLDERS[key].format(v=VENDORED_CHARTS[key])


def _webhook_services(docs: list[Any]) -> set[tuple[str, str]]:
    """(namespace, name) of every Service a webhook configuration or a CRD's conversion webhook names."""
    found: set[tuple[str, str]] = set()
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        configs: list[dict[str, Any]] = []
        if doc.get("kind") in WEBHOOK_KINDS:
            configs = [w["clientConfig"] for w in doc.get("webhooks", [])]
        elif doc.get("kind") == "CustomResourceDefinition":
            conv = (doc.get("spec", {}).get("conversion") or {}).get("webhook") or {}
            configs = [conv["clientConfig"]] if "clientConfig" in conv else []
        found |= {(c["service"]["namespace"], c["service"]["name"]) for c in configs if "service" in c}
    return found


def _chart_docs() -> dict[str, list[Any]]:
    """Per piece that registers webhooks, the plain-YAML documents of its vendored chart that can hold them
    (KServe's files without template directives; LWS's CRDs and its webhook template, its one directive filled)."""
    kserve = _chart("kserve")
    paths = sorted(kserve.glob("*/files/**/*.yaml")) + sorted(kserve.glob("*/templates/*.yaml"))
    kserve_docs = [d for p in paths if "{{" not in (text := p.read_text()) for d in yaml.safe_load_all(text)]
    lws_text = (_chart("lws") / "templates" / "webhook" / "webhook.yaml").read_text()
    lws_docs = list(yaml.safe_load_all(lws_text.replace("{{ .Release.Namespace }}", LWS_NAMESPACE)))
    lws_docs += [d for p in sorted((_chart("lws") / "crds").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    return {"kserve": kserve_docs, "lws": lws_docs}


def chart_webhook_services() -> dict[str, set[tuple[str, str]]]:
    """Per piece (stack-file key), the webhook Services its vendored chart registers."""
    return {piece: _webhook_services(docs) for piece, docs in _chart_docs().items()}


def chart_webhook_names() -> dict[str, set[str]]:
    """Per piece, the names of the admission webhooks (not conversion) its vendored chart registers."""
    return {piece: {w["name"] for d in docs if isinstance(d, dict) and d.get("kind") in WEBHOOK_KINDS
                    for w in d.get("webhooks", [])} for piece, docs in _chart_docs().items()}


@dataclass(frozen=True)
class WebhookServer:
    """One manager's webhook server: the Service the charts name, its local port, its certificate."""

    namespace: str
    service: str
    port: int
    cert_dir: Path  # tls.crt / tls.key: controller-runtime's default CertDir under `tmpdir`

    @property
    def tmpdir(self) -> Path:
        """The TMPDIR under which controller-runtime looks for ``k8s-webhook-server/serving-certs``."""
        return self.cert_dir.parent.parent

    @property
    def dns_name(self) -> str:
        return f"{self.service}.{self.namespace}.svc"  # the server name kube-apiserver's client verifies


@dataclass
class Webhooks:
    """The harness's CA and one webhook server per piece that registers webhooks."""

    ca_file: Path
    servers: dict[str, WebhookServer] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    """The servers' ports, held until :meth:`release`."""

    def release(self) -> None:
        for held in self.reservations:
            held.release()

    def server_args(self) -> list[str]:
        """tkf-kube-apiserver's flags: admission webhooks on, each Service resolved, the CA trusted."""
        return ["--admission-webhooks", f"--webhook-ca-file={self.ca_file}",
                *(f"--webhook-service={s.namespace}/{s.service}=127.0.0.1:{s.port}"
                  for s in self.servers.values())]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def webhook_servers(workdir: Path) -> Webhooks:
    """A CA and, for each webhook Service the charts register, a port and a certificate it signs."""
    workdir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("tkf-test-webhook-ca")).issuer_name(_name("tkf-test-webhook-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(validity[0]).not_valid_after(validity[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    hooks = Webhooks(workdir / "ca.crt")
    hooks.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for piece, services in chart_webhook_services().items():
        if len(services) != 1:
            raise AssertionError(f"{piece}'s chart names webhook Services {sorted(services)}; this harness runs one "
                                 "webhook server per manager: serve each (tests/controllers/webhooks.py)")
        (namespace, service), = services
        certs = workdir / piece / "k8s-webhook-server" / "serving-certs"
        hooks.reservations.append(held := reserve())
        server = WebhookServer(namespace, service, held.port, certs)
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (x509.CertificateBuilder().subject_name(_name(server.dns_name)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(validity[0]).not_valid_after(validity[1])
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(server.dns_name),
                                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        server.cert_dir.mkdir(parents=True, exist_ok=True)
        (server.cert_dir / "tls.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        (server.cert_dir / "tls.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        hooks.servers[piece] = server
    return hooks


def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's CRDs from the vendored chart, as Helm renders them with ``crds.enabled`` (and the
    chart's default ``crds.keep``): the whole-line directives dropped, the labels filled in."""
    crds: list[dict[str, Any]] = []
    files = sorted((_chart("certManager") / "templates").glob("crd-*.yaml"))
    if not files:
        raise AssertionError(f"no templates/crd-*.yaml in {_chart('certManager')}: is the vendored chart there?")
    for path in files:
        text = "\n".join(line for line in path.read_text().splitlines() if not _DIRECTIVE_LINE.match(line))
        crds += [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    for crd in crds:
        crd["metadata"]["labels"] = dict(CERT_MANAGER_LABELS)
    if "{{" in yaml.safe_dump(crds):
        raise AssertionError(f"cert-manager's templates/crd-*.yaml ({_chart('certManager')}) have a template "
                             "directive inside a line: render them with Helm instead")
    return crds


def install_cert_manager_crds(kube: KubeClient) -> None:
    crds = cert_manager_crds()
    for crd in crds:
        kube.apply(crd)
    for crd in crds:
        kube.wait_crd_served(crd, timeout=120)


class StartWhenServed:
    """Start a manager from a thread as soon as every CRD it watches is served, while `up` installs them.

    Why mid-`up`: KServe's manager decides at start which kinds to watch (it skips HTTPRoute or
    LeaderWorkerSet if their CRDs are absent), so it cannot start before the charts are applied; and the
    same `up` goes on to create objects its webhooks judge (presets, LLMInferenceServices), which fail
    unless it serves them — the server waits for its port (--webhook-wait), not for the test.
    """

    def __init__(self, client: Callable[[], KubeClient], crds: list[str], start: Callable[[], Any],
                 timeout: float = 600.0) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, crds, start, timeout), daemon=True)
        self._thread.start()

    def _run(self, client: Callable[[], KubeClient], crds: list[str], start: Callable[[], Any], timeout: float) -> None:
        try:
            deadline = time.monotonic() + timeout
            with client() as kube:
                for name in crds:
                    while (crd := kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)) is None:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"CRD {name} never appeared")
                        if self._cancelled.wait(0.3):
                            return
                    kube.wait_crd_served(crd, timeout=max(1.0, deadline - time.monotonic()))
            if not self._cancelled.is_set():
                self.result = start()
        except BaseException as err:  # handed to the test by wait()
            self.error = err

    def cancel(self) -> None:
        """Never start the manager (a failed `up`); returns once the thread cannot start it any more."""
        self._cancelled.set()
        self._thread.join(130)

    def wait(self, timeout: float = 60.0) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the manager was not started: its CRDs were not all served")
        if self.error is not None:
            raise self.error
        return self.result


def webhook_calls(kube: KubeClient) -> dict[str, dict[str, float]]:
    """Per webhook name, the calls kube-apiserver made to it, by ``rejected`` = "true" / "false": its own count
    (``apiserver_admission_webhook_admission_duration_seconds_count``), so a webhook that was never called,
    or that refused something, shows here whatever the objects look like."""
    calls: dict[str, dict[str, float]] = {}
    prefix = "apiserver_admission_webhook_admission_duration_seconds_count{"
    for line in kube.text("/metrics").splitlines():
        if line.startswith(prefix):
            labels_text, value = line[len(prefix):].rsplit("} ", 1)
            labels = dict(part.split("=", 1) for part in labels_text.split(","))
            name, rejected = labels["name"].strip('"'), labels["rejected"].strip('"')
            calls.setdefault(name, {}).setdefault(rejected, 0.0)
            calls[name][rejected] += float(value)
    return calls

