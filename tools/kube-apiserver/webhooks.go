package main

// Admission webhooks on the test server, served by controller managers running as local processes.
//
// A chart registers its webhooks by Service reference (clientConfig.service: name, namespace, path)
// and cert-manager's cainjector fills in caBundle. Here no kube-proxy, no pod network and no
// cainjector exist, so two stand-ins make the chart's own (Validating|Mutating)WebhookConfigurations
// work unmodified:
//   - --webhook-service NAMESPACE/NAME=HOST:PORT (repeatable) resolves that Service to a local port
//     (kube-apiserver's public SetServiceResolverForTests hook; the TLS server name stays
//     NAME.NAMESPACE.svc, as on a cluster, so the serving certificate must name it);
//   - --webhook-ca-file PEM is trusted as the system roots of this process (SSL_CERT_FILE), which the
//     webhook client uses when a configuration carries no caBundle.
// Any other Service a webhook, CRD conversion or APIService names fails to resolve, as a Service
// without endpoints does. A named Service whose port does not accept connections yet is waited for
// (up to --webhook-wait): the harness starts each manager once the CRDs it watches exist, in the middle
// of the `pulumi up` that installs them and then the objects its webhooks judge; on a cluster the
// chart's Deployment would be rolling out then and a client would retry.

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// serviceMap is the --webhook-service flag: "namespace/name" → "host:port".
type serviceMap map[string]string

func (m serviceMap) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k+"="+m[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (m serviceMap) Set(v string) error {
	svc, addr, ok := strings.Cut(v, "=")
	ns, name, nsOK := strings.Cut(svc, "/")
	if !ok || !nsOK || ns == "" || name == "" {
		return fmt.Errorf("%q: want NAMESPACE/NAME=HOST:PORT", v)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q: %v", v, err)
	}
	m[svc] = addr
	return nil
}

// resolver is kube-apiserver's webhook.ServiceResolver for the --webhook-service map.
type resolver struct {
	services serviceMap
	wait     time.Duration
	up       *sync.Map // addresses that once accepted a connection: not probed again (each probe is a TLS handshake error in the server's log)
}

// ResolveEndpoint ignores the Service port: each Service named here is one webhook server.
func (r resolver) ResolveEndpoint(namespace, name string, _ int32) (*url.URL, error) {
	addr, ok := r.services[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("service %s/%s has no endpoints on this test server (not a --webhook-service)", namespace, name)
	}
	for deadline := time.Now().Add(r.wait); ; {
		if _, ok := r.up.Load(addr); ok {
			break
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			r.up.Store(addr, true)
			break
		}
		if time.Now().After(deadline) {
			break // the call itself then fails as it would against a Service with no ready endpoint
		}
		time.Sleep(200 * time.Millisecond)
	}
	return &url.URL{Scheme: "https", Host: addr}, nil
}

// configureWebhooks installs the resolver and the trusted CA; call before the apiserver starts.
func configureWebhooks(services serviceMap, caFile string, wait time.Duration) error {
	if caFile != "" {
		if _, err := os.Stat(caFile); err != nil {
			return fmt.Errorf("--webhook-ca-file: %w", err)
		}
		// Read once, lazily, by crypto/x509's system pool: nothing has used it yet.
		if err := os.Setenv("SSL_CERT_FILE", caFile); err != nil {
			return err
		}
	}
	if len(services) > 0 {
		apiserverapp.SetServiceResolverForTests(resolver{services, wait, &sync.Map{}})
	}
	return nil
}
