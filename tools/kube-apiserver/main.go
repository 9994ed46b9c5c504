// Command tkf-kube-apiserver runs a real, throw-away Kubernetes control plane for tests: an embedded
// etcd, kube-apiserver, and a kube-controller-manager that runs, by default, only the garbage-collector and
// namespace controllers (without them foreground deletes and namespace deletes never finish); with
// --scheduler (or the --cluster preset, see cluster.go) also the real kube-scheduler.
// Everything listens on 127.0.0.1 only; state lives in a temp dir removed on exit.
//
// Usage:
//
//	tkf-kube-apiserver --kubeconfig PATH [--data-dir DIR] [--secure-port N] [--controllers LIST]
//	    [--cluster] [--scheduler [--scheduler-config FILE]] [--kcm-arg FLAG ...]
//	    [--admission-webhooks [--webhook-service NS/NAME=HOST:PORT ...] [--webhook-ca-file PEM] [--webhook-wait D]]
//	    [-- extra kube-apiserver flags]
//
// The kubeconfig (admin token, CA of the generated serving cert) is written only once /readyz
// answers 200, then one JSON line {"server":…,"kubeconfig":…} is printed on stdout. SIGTERM/SIGINT
// stop everything. The binary re-executes itself as `tkf-kube-apiserver controller-manager …` for
// the controllers and `tkf-kube-apiserver scheduler …` for the scheduler: running several cobra
// commands in one process would share global feature gates, metrics registries and the once-only
// signal handler.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "controller-manager" || os.Args[1] == "scheduler") {
		cmd := kcmapp.NewControllerManagerCommand()
		if os.Args[1] == "scheduler" {
			cmd = schedulerapp.NewSchedulerCommand()
		}
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tkf-kube-apiserver:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfigPath := flag.String("kubeconfig", "", "where to write the admin kubeconfig once the server is ready (required)")
	dataDir := flag.String("data-dir", "", "directory for etcd data, certs and keys (default: a temp dir removed on exit)")
	securePort := flag.Int("secure-port", 0, "kube-apiserver HTTPS port on 127.0.0.1 (0: pick a free one)")
	readyTimeout := flag.Duration("ready-timeout", 3*time.Minute, "give up if /readyz does not answer 200 in time")
	controllers := flag.String("controllers", defaultControllers,
		"kube-controller-manager controllers to run (its --controllers list); the workload controllers "+
			"(deployment-controller,replicaset-controller,statefulset-controller,job-controller) turn objects "+
			"written by KServe or LWS into Pods, which stay Pending: no kubelet runs")
	admissionWebhooks := flag.Bool("admission-webhooks", false,
		"run the MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins (off by default: a chart's "+
			"webhook configurations would fail every matching request when nothing serves them)")
	webhookServices := serviceMap{}
	flag.Var(webhookServices, "webhook-service",
		"NAMESPACE/NAME=HOST:PORT: where the Service a webhook names is served (repeatable; see webhooks.go)")
	webhookCA := flag.String("webhook-ca-file", "",
		"PEM CA trusted for webhook servers whose configuration has no caBundle (cainjector's stand-in)")
	webhookWait := flag.Duration("webhook-wait", 60*time.Second,
		"how long a call to a --webhook-service waits for its port to accept connections")
	cluster := flag.Bool("cluster", false,
		"the cluster tier's control plane: the scheduler and the controllers simulated kubelets (kwok) need "+
			"(clusterControllers in cluster.go), with node-health timings for kwok's leases; --controllers, "+
			"when given too, replaces the controller list")
	withScheduler := flag.Bool("scheduler", false, "run the real kube-scheduler (a re-exec of this binary)")
	schedulerConfig := flag.String("scheduler-config", "",
		"a KubeSchedulerConfiguration (YAML) for the scheduler, e.g. another scoring profile; its "+
			"clientConnection.kubeconfig is filled in (implies --scheduler)")
	kcmArgs := stringList{}
	flag.Var(&kcmArgs, "kcm-arg", "an extra kube-controller-manager flag, e.g. --kcm-arg=--node-monitor-grace-period=30s (repeatable)")
	flag.Parse()
	controllersSet := false
	flag.Visit(func(f *flag.Flag) { controllersSet = controllersSet || f.Name == "controllers" })
	if *cluster {
		*withScheduler = true
		if !controllersSet {
			*controllers = clusterControllers
		}
		kcmArgs = append(append(stringList{}, clusterKCMArgs...), kcmArgs...) // later flags win
	}
	*withScheduler = *withScheduler || *schedulerConfig != ""
	if *kubeconfigPath == "" {
		return errors.New("--kubeconfig is required")
	}
	if err := configureWebhooks(webhookServices, *webhookCA, *webhookWait); err != nil {
		return err
	}
	disabledAdmission := "ServiceAccount,MutatingAdmissionWebhook,ValidatingAdmissionWebhook"
	if *admissionWebhooks {
		disabledAdmission = "ServiceAccount"
	}
	start := time.Now()

	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "tkf-kube-apiserver-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	port := *securePort
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	server := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	creds, err := writeCredentials(dir)
	if err != nil {
		return err
	}

	// Flags, not internal option structs: the CLI is the stable interface of kube-apiserver.
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		// Must be explicit: for a loopback bind address the server would advertise the
		// default-route interface (and fail to start without a default route).
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + creds.certFile, "--tls-private-key-file=" + creds.keyFile,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + creds.tokenFile,
		"--authorization-mode=RBAC", // system:masters passes; charts' RBAC objects are still validated
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + creds.saKeyFile,
		"--service-account-signing-key-file=" + creds.saKeyFile,
		// A /16, as real clusters give (EKS: 10.100.0.0/16 or 172.20.0.0/16), apart from kwok's pod range
		// (tests/cluster/harness.py POD_CIDR): a /24 holds 254 ClusterIPs, and a 300-model fleet asks one
		// Service a model plus the platform's ("failed to allocate a serviceIP … range is full",
		// docs/admission.md).
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// No ServiceAccount controller runs by default, so no `default` SA would ever exist for pods.
		// The webhook plugins are off unless --admission-webhooks: applied
		// (Validating|Mutating)WebhookConfigurations whose backends do not run here would make every
		// matching request fail.
		"--disable-admission-plugins=" + disabledAdmission,
		// Resolve any remaining service calls (APIService, CRD conversion webhooks) to
		// EndpointSlice IPs (none) instead of dialling a ClusterIP that would leave the machine.
		"--enable-aggregator-routing=true",
		"--enable-priority-and-fairness=false", // less CPU on a 2-core machine
		"--endpoint-reconciler-type=none",      // no `kubernetes` Endpoints churn in the logs
		"--profiling=false",
	}
	args = append(args, flag.Args()...) // extra kube-apiserver flags after `--`

	apiserverDone := make(chan error, 1)
	go func() {
		// NewAPIServerCommand installs the SIGTERM/SIGINT handler that cancels the server context.
		cmd := apiserverapp.NewAPIServerCommand()
		cmd.SetArgs(args)
		apiserverDone <- cmd.Execute()
	}()

	if err := waitReady(server, creds, *readyTimeout, apiserverDone); err != nil {
		return err
	}
	readyAfter := time.Since(start)

	internalKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(internalKubeconfig, server, creds); err != nil {
		return err
	}
	kcmDone, kcm, err := startControllerManager(internalKubeconfig, *controllers, kcmArgs)
	if err != nil {
		return err
	}
	var schedDone chan error
	var sched *exec.Cmd
	if *withScheduler {
		if schedDone, sched, err = startScheduler(dir, internalKubeconfig, *schedulerConfig); err != nil {
			_ = kcm.Process.Kill()
			return err
		}
	}
	if err := writeKubeconfig(*kubeconfigPath, server, creds); err != nil {
		return err
	}
	line, _ := json.Marshal(map[string]any{
		"server": server, "kubeconfig": *kubeconfigPath, "etcd": etcdURL, "dataDir": dir,
		"readySeconds": readyAfter.Seconds(),
	})
	fmt.Println(string(line))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var failure error
	select {
	case <-sigs:
	case err := <-apiserverDone:
		failure = fmt.Errorf("kube-apiserver stopped: %v", err)
		apiserverDone <- nil
	case err := <-kcmDone:
		failure = fmt.Errorf("controller-manager stopped: %v", err)
		kcmDone <- nil
	case err := <-schedDone: // nil channel (blocks forever) without --scheduler
		failure = fmt.Errorf("scheduler stopped: %v", err)
		schedDone <- nil
	}
	// Stop in reverse order; the apiserver's own handler has seen the same signal.
	if sched != nil {
		stopChild(sched, schedDone)
	}
	stopChild(kcm, kcmDone)
	select {
	case <-apiserverDone:
	case <-time.After(15 * time.Second):
	}
	return failure
}

// startEtcd runs etcd in-process: the etcd server module is already in kube-apiserver's
// dependency graph at the version Kubernetes tests against, so no separate etcd binary is needed.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	ports := make([]int, 2)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, "", err
		}
		ports[i] = p
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true // test data: durability is not worth the fsync latency
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("not ready after 60s")
	}
}

type credentials struct {
	certFile, keyFile, tokenFile, saKeyFile string
	caPEM                                   []byte
	token                                   string
}

// writeCredentials generates a serving cert for 127.0.0.1/localhost (signed by a fresh CA that
// goes into the kubeconfig), a service-account signing key, and an admin bearer token.
func writeCredentials(dir string) (*credentials, error) {
	c := &credentials{
		certFile: filepath.Join(dir, "serving.crt"), keyFile: filepath.Join(dir, "serving.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"), saKeyFile: filepath.Join(dir, "sa.key"),
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	// certPEM is the leaf followed by the CA that signed it; clients trust the CA only.
	for rest := certPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c.caPEM = pem.EncodeToMemory(block)
	}
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	c.token = hex.EncodeToString(raw)
	files := map[string][]byte{
		c.certFile: certPEM, c.keyFile: keyPEM, c.saKeyFile: saKey,
		// token,user,uid,"groups": system:masters bypasses RBAC.
		c.tokenFile: []byte(c.token + `,admin,admin,"system:masters"` + "\n"),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func waitReady(server string, c *credentials, timeout time.Duration, apiserverDone <-chan error) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-apiserverDone:
			return fmt.Errorf("kube-apiserver exited before ready: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("kube-apiserver not ready after %s", timeout)
}

// writeKubeconfig writes atomically (temp file + rename): a reader that sees the file sees all of it.
func writeKubeconfig(path, server string, c *credentials) error {
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "tkf-test",
		"clusters": []any{map[string]any{"name": "tkf-test", "cluster": map[string]any{
			"server": server, "certificate-authority-data": c.caPEM, // []byte → base64, as kubeconfig wants
		}}},
		"users":    []any{map[string]any{"name": "admin", "user": map[string]any{"token": c.token}}},
		"contexts": []any{map[string]any{"name": "tkf-test", "context": map[string]any{"cluster": "tkf-test", "user": "admin"}}},
	}
	data, err := json.MarshalIndent(cfg, "", "  ") // JSON is valid YAML; client-go and kubectl read it
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// defaultControllers: what deletions need (foreground deletes and namespace deletes never finish
// without them).
const defaultControllers = "garbage-collector-controller,namespace-controller"

// startControllerManager runs this binary's `controller-manager` mode with the given controllers
// (by default only those deletions need). Pdeathsig kills it if this process dies without cleaning up (even SIGKILL);
// Pdeathsig fires when the *thread* that forked exits, so that goroutine keeps its thread locked
// for the child's whole life.
func startControllerManager(kubeconfig, controllers string, extra []string) (chan error, *exec.Cmd, error) {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--secure-port=0", // no HTTPS endpoint: nothing scrapes it
		"--use-service-account-credentials=false",
	}
	return startChild("controller-manager", append(args, extra...))
}

// startChild re-executes this binary as `self mode args…`, its output on our stderr, killed with us.
func startChild(mode string, args []string) (chan error, *exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self, append([]string{mode}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	return done, cmd, nil
}

// stopChild sends SIGTERM, then SIGKILL after 5 s.
func stopChild(cmd *exec.Cmd, done chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
