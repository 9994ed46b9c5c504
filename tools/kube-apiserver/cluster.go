package main

// The cluster tier's control plane (--cluster): the real kube-scheduler and the controllers that turn
// what KServe, LWS and the program write into pods on simulated nodes (kwok, tests/cluster/), then keep
// those nodes' health as a cluster would.
//
// Found by trial (issue 39): nodes created through the API carry the node.kubernetes.io/not-ready taint
// until the node-lifecycle controller sees them Ready and removes it; PVCs bind only through the
// persistent-volume binder; Pulumi's Service await waits for endpoints, which only the endpoints and
// EndpointSlice controllers write; a deleted PVC or PV waits on its protection finalizer's controller.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// clusterControllers: the kube-controller-manager's controllers under --cluster. Deletion needs the
// first two; the workload controllers make pods of Deployments, ReplicaSets, StatefulSets, Jobs and
// DaemonSets (a platform chart's DaemonSet, node-feature-discovery's, is awaited by Pulumi);
// node-lifecycle judges node health from kwok's leases and taints NotReady nodes (taint-eviction then
// evicts their pods, pod-garbage-collector removes pods of deleted nodes); the persistent-volume binder
// binds claims to the volumes the harness's provisioner makes (the protection controllers let claims and
// volumes be deleted); endpoints and EndpointSlices for Services; each namespace's default
// ServiceAccount; Jobs' TTL after they finish.
const clusterControllers = "garbage-collector-controller,namespace-controller," +
	"deployment-controller,replicaset-controller,statefulset-controller,job-controller,daemonset-controller," +
	"node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller," +
	"persistentvolume-binder-controller,persistentvolumeclaim-protection-controller," +
	"persistentvolume-protection-controller," +
	"endpoints-controller,endpointslice-controller,serviceaccount-controller,ttl-after-finished-controller"

// clusterKCMArgs: node health on kwok's timing. kwok renews each node's Lease (its
// --node-lease-duration-seconds, the harness passes 40: renewed every 10 s); a node whose Lease is not
// renewed for the grace period turns Unknown. 40 s of grace survives a loaded 2-core machine (the
// default, 50 s, with kwok's default of no lease, made nodes flap at ~50 s in the trial) and
// still lets a lost node be seen within a test's patience. Checked every 2 s (default 5 s).
var clusterKCMArgs = []string{
	"--node-monitor-period=2s",
	"--node-monitor-grace-period=40s",
	"--node-startup-grace-period=40s",
}

// startScheduler runs this binary's `scheduler` mode (kube-scheduler) against the server. With a
// KubeSchedulerConfiguration file (another scoring profile, say) its clientConnection.kubeconfig is
// set to the admin kubeconfig: kube-scheduler reads the connection only from the file when one is given.
func startScheduler(dir, kubeconfig, configFile string) (chan error, *exec.Cmd, error) {
	args := []string{
		"--leader-elect=false",
		"--secure-port=0", // no HTTPS endpoint: nothing scrapes it
	}
	if configFile == "" {
		args = append(args, "--kubeconfig="+kubeconfig)
	} else {
		path, err := schedulerConfig(dir, kubeconfig, configFile)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, "--config="+path)
	}
	return startChild("scheduler", args)
}

func schedulerConfig(dir, kubeconfig, configFile string) (string, error) {
	data, err := os.ReadFile(configFile)
	if err != nil {
		return "", fmt.Errorf("--scheduler-config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("--scheduler-config %s: %w", configFile, err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = kubeconfig
	cfg["clientConnection"] = conn
	out, err := json.Marshal(cfg) // JSON is YAML: kube-scheduler reads it
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "scheduler-config.json")
	return path, os.WriteFile(path, out, 0o600)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
