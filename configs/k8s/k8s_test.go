// Package k8s holds the example Kubernetes manifests of sharetx as a sidecar
// (*.yaml in this directory; sidecar/, the kustomize component that adds it
// to any labelled Deployment or StatefulSet) and their offline validation: no
// cluster and no kubectl needed. The manifests are decoded strictly into the
// Kubernetes API's own types (k8s.io/api; a misspelt field fails), rendered
// with kustomize's own library (krusty), and the result checked against the
// code: the embedded sharetx configuration goes through configs.Load, the
// SHARETX_* variables must be real keys, probes must hit paths cmd/sharetx
// serves on the port it serves them, flags must exist, the image must be the
// one `make image` builds from the Dockerfile, and the Dockerfile's own build
// command is run and the binary it makes accepts the manifest's arguments.
package k8s

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sharetx/sharetx/configs"
	"github.com/sharetx/sharetx/configs/internal/codefacts"
)

// ---------------------------------------------------------------- schema
//
// Deployments, ConfigMaps and the Kustomization are decoded strictly into
// the real types (k8s.io/api, sigs.k8s.io/kustomize/api/types, through
// sigs.k8s.io/yaml): a field the API does not have ("readinesProbe") or a
// value of the wrong shape is an error. The Prometheus Operator's two kinds
// are decoded strictly (yaml.v3, KnownFields) into the subset of their
// schema these manifests use: their Go types come with the operator's whole
// module tree.

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []any             `yaml:"matchExpressions"`
}

type podMonitor struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		JobLabel            string        `yaml:"jobLabel"`
		Selector            labelSelector `yaml:"selector"`
		NamespaceSelector   any           `yaml:"namespaceSelector"`
		PodMetricsEndpoints []struct {
			Port              string `yaml:"port"`
			Path              string `yaml:"path"`
			Interval          string `yaml:"interval"`
			ScrapeTimeout     string `yaml:"scrapeTimeout"`
			Scheme            string `yaml:"scheme"`
			Relabelings       []any  `yaml:"relabelings"`
			MetricRelabelings []any  `yaml:"metricRelabelings"`
		} `yaml:"podMetricsEndpoints"`
	} `yaml:"spec"`
}

type prometheusRule struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string `yaml:"name"`
			Interval string `yaml:"interval"`
			Rules    []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	} `yaml:"spec"`
}

// kinds are the (apiVersion, kind) pairs a manifest here may have, and
// whether they decode into the API's own types (sigs.k8s.io/yaml) or a CRD
// subset (yaml.v3).
var kinds = map[string]struct {
	new func() any
	api bool
}{
	"v1/ConfigMap":                                  {func() any { return &corev1.ConfigMap{} }, true},
	"apps/v1/Deployment":                            {func() any { return &appsv1.Deployment{} }, true},
	"monitoring.coreos.com/v1/PodMonitor":           {func() any { return &podMonitor{} }, false},
	"monitoring.coreos.com/v1/PrometheusRule":       {func() any { return &prometheusRule{} }, false},
	"kustomize.config.k8s.io/v1beta1/Kustomization": {func() any { return &kusttypes.Kustomization{} }, true},
	"kustomize.config.k8s.io/v1alpha1/Component":    {func() any { return &kusttypes.Kustomization{} }, true},
}

// optionalCRDs are applied separately (they need the Prometheus Operator),
// so kustomization.yaml must not list them.
var optionalCRDs = map[string]bool{"PodMonitor": true, "PrometheusRule": true}

// ---------------------------------------------------------------- loading

type object struct {
	file string
	kind string
	name string
	v    any
}

type manifests struct {
	files   map[string]bool
	objects []object
}

func (m *manifests) all(kind string) []object {
	var out []object
	for _, o := range m.objects {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// load parses every YAML document of files (name → content), strictly.
func load(files map[string][]byte) (*manifests, []error) {
	m := &manifests{files: map[string]bool{}}
	var errs []error
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
		m.files[f] = true
	}
	sort.Strings(names)
	for _, f := range names {
		dec := yaml.NewDecoder(bytes.NewReader(files[f]))
		for i := 0; ; i++ {
			var n yaml.Node
			err := dec.Decode(&n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: document %d: %v", f, i, err))
				break
			}
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			}
			if err := n.Decode(&head); err != nil {
				errs = append(errs, fmt.Errorf("%s: document %d: %v", f, i, err))
				continue
			}
			where := fmt.Sprintf("%s: document %d (%s %s)", f, i, head.Kind, head.Metadata.Name)
			if head.APIVersion == "" || head.Kind == "" {
				errs = append(errs, fmt.Errorf("%s: apiVersion and kind are required", where))
				continue
			}
			mk, ok := kinds[head.APIVersion+"/"+head.Kind]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: apiVersion %s kind %s is not one this directory is checked for", where, head.APIVersion, head.Kind))
				continue
			}
			if head.Kind != "Kustomization" && head.Kind != "Component" && !dns1123.MatchString(head.Metadata.Name) {
				errs = append(errs, fmt.Errorf("%s: metadata.name %q is not a DNS-1123 name", where, head.Metadata.Name))
			}
			raw, _ := yaml.Marshal(&n)
			v := mk.new()
			if mk.api {
				err = sigsyaml.UnmarshalStrict(raw, v)
			} else {
				strict := yaml.NewDecoder(bytes.NewReader(raw))
				strict.KnownFields(true)
				err = strict.Decode(v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", where, err))
				continue
			}
			m.objects = append(m.objects, object{file: f, kind: head.Kind, name: head.Metadata.Name, v: v})
		}
	}
	return m, errs
}

// ---------------------------------------------------------------- facts

// facts are what the manifests are checked against, read from the code.
type facts struct {
	flags     map[string]string
	paths     []string
	envNames  map[string]bool
	metrics   map[string]codefacts.Metric
	image     string // IMAGE of `make image`
	docker    dockerfile
	keys      []string
	appBudget time.Duration // what the pod's grace period must leave the app
}

type dockerfile struct {
	text       string
	finalBase  string
	user       string
	entrypoint []string
	expose     map[int]bool
	build      string // the RUN line with go build
	copyTo     []string
}

func readFacts(root string) (*facts, error) {
	f := &facts{envNames: map[string]bool{}, appBudget: 30 * time.Second}
	var err error
	if f.flags, err = codefacts.Flags(root); err != nil {
		return nil, err
	}
	if f.paths, err = codefacts.HTTPPaths(root); err != nil {
		return nil, err
	}
	if f.metrics, err = codefacts.Metrics(root); err != nil {
		return nil, err
	}
	if f.image, err = codefacts.MakeVar(root, "IMAGE"); err != nil {
		return nil, err
	}
	for _, e := range configs.EnvNames() {
		f.envNames[e] = true
	}
	f.keys = configs.Keys()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	if f.docker, err = parseDockerfile(string(raw)); err != nil {
		return nil, err
	}
	return f, nil
}

func parseDockerfile(src string) (dockerfile, error) {
	d := dockerfile{text: src, expose: map[int]bool{}}
	src = strings.ReplaceAll(src, "\\\n", " ")
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			d.finalBase = strings.Fields(rest)[0]
			d.user, d.entrypoint = "", nil // a new stage starts afresh
		case "USER":
			d.user = rest
		case "ENTRYPOINT":
			if err := yaml.Unmarshal([]byte(rest), &d.entrypoint); err != nil || len(d.entrypoint) == 0 {
				return d, fmt.Errorf("Dockerfile: ENTRYPOINT %s is not an exec-form JSON array", rest)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				p, _, _ = strings.Cut(p, "/")
				lo, hi, isRange := strings.Cut(p, "-")
				a, err1 := strconv.Atoi(lo)
				b := a
				var err2 error
				if isRange {
					b, err2 = strconv.Atoi(hi)
				}
				if err1 != nil || err2 != nil || b < a {
					return d, fmt.Errorf("Dockerfile: EXPOSE %s is not a port or range", p)
				}
				for x := a; x <= b; x++ {
					d.expose[x] = true
				}
			}
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		case "COPY":
			fs := strings.Fields(rest)
			d.copyTo = append(d.copyTo, fs[len(fs)-1])
		}
	}
	if d.build == "" {
		return d, errors.New("Dockerfile: no RUN ... go build")
	}
	return d, nil
}

// ---------------------------------------------------------------- checks

// sidecar is what the checks learn about the sharetx container.
type sidecar struct {
	dep        *appsv1.Deployment
	c          *corev1.Container
	cfg        configs.Config
	env        []string
	configPath string
}

// render renders the kustomization at the root of files (names relative to
// configs/k8s) with kustomize's own library, as `kubectl kustomize` would,
// on an in-memory copy of them.
func render(files map[string][]byte) ([]byte, error) {
	fs := filesys.MakeFsInMemory()
	for name, b := range files {
		if err := fs.WriteFile(filepath.Join("/k8s", name), b); err != nil {
			return nil, err
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/k8s")
	if err != nil {
		return nil, err
	}
	return rm.AsYaml()
}

// renderedFile names the rendered kustomization in errors.
const renderedFile = "kubectl kustomize configs/k8s"

// checkFiles decodes every manifest strictly, renders the kustomization and
// checks the result (check): what TestManifests runs, and every broken case.
func checkFiles(files map[string][]byte, f *facts) (raw, rendered *manifests, errs []error) {
	raw, errs = load(files)
	out, err := render(files)
	if err != nil {
		return raw, &manifests{files: map[string]bool{}}, append(errs, fmt.Errorf("%s: %v", renderedFile, err))
	}
	rendered, more := load(map[string][]byte{renderedFile: out})
	errs = append(errs, more...)
	return raw, rendered, append(errs, check(raw, rendered, f)...)
}

// check checks the manifests (raw: the files; rendered: what the
// kustomization makes of them) against the code.
func check(raw, rendered *manifests, f *facts) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// The kustomizations (the root one and the sidecar component) reach
	// every plain manifest and no CRD-dependent one.
	listed := map[string]bool{}
	roots := 0
	for _, o := range append(raw.all("Kustomization"), raw.all("Component")...) {
		k := o.v.(*kusttypes.Kustomization)
		dir := filepath.Dir(o.file)
		if o.kind == "Kustomization" && dir == "." {
			roots++
		}
		refs := append([]string{}, k.Resources...)
		for _, p := range k.Patches {
			if p.Path != "" {
				refs = append(refs, p.Path)
			}
		}
		for _, r := range refs {
			r = filepath.Join(dir, r)
			if !raw.files[r] {
				fail("%s: %s is not a manifest in configs/k8s", o.file, r)
			}
			listed[r] = true
		}
	}
	if roots != 1 {
		fail("want exactly one kustomization.yaml at the top of configs/k8s")
	}
	for _, o := range raw.objects {
		switch {
		case o.kind == "Kustomization" || o.kind == "Component":
		case optionalCRDs[o.kind] && listed[o.file]:
			fail("%s: %s needs the Prometheus Operator's CRDs; kustomization.yaml must not list it", o.file, o.kind)
		case !optionalCRDs[o.kind] && !listed[o.file]:
			fail("%s: %s %s is not listed in a kustomization", o.file, o.kind, o.name)
		}
	}

	cms := map[string]*corev1.ConfigMap{}
	for _, o := range rendered.all("ConfigMap") {
		cms[o.name] = o.v.(*corev1.ConfigMap)
	}
	deps := rendered.all("Deployment")
	if len(deps) != 1 {
		fail("%s: want exactly one Deployment, have %d", renderedFile, len(deps))
		return errs
	}
	sc, more := checkDeployment(deps[0].v.(*appsv1.Deployment), cms, f)
	errs = append(errs, more...)
	if sc == nil {
		return errs
	}
	metricsPort := portOf(sc.cfg.Metrics.Address)
	m := raw

	for _, o := range m.all("PodMonitor") {
		pm := o.v.(*podMonitor)
		tmpl := sc.dep.Spec.Template.Labels
		if len(pm.Spec.Selector.MatchLabels) == 0 {
			fail("%s: PodMonitor selects no labels", o.file)
		}
		for k, v := range pm.Spec.Selector.MatchLabels {
			if tmpl[k] != v {
				fail("%s: PodMonitor selects %s=%s, which the Deployment's pods do not carry", o.file, k, v)
			}
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			p := namedPort(sc.c, ep.Port)
			if p == 0 || p != metricsPort {
				fail("%s: PodMonitor port %q is not the sharetx container's metrics port (%d)", o.file, ep.Port, metricsPort)
			}
			if !contains(f.paths, ep.Path) || ep.Path != "/metrics" {
				fail("%s: PodMonitor path %q: sharetx serves metrics on /metrics", o.file, ep.Path)
			}
			if ep.Interval != "" {
				if _, err := time.ParseDuration(ep.Interval); err != nil {
					fail("%s: interval %q: %v", o.file, ep.Interval, err)
				}
			}
		}
	}

	for _, o := range m.all("PrometheusRule") {
		pr := o.v.(*prometheusRule)
		n := 0
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				n++
				if r.Alert == "" && r.Record == "" {
					fail("%s: a rule with neither alert nor record", o.file)
				}
				if r.For != "" {
					if _, err := time.ParseDuration(r.For); err != nil {
						fail("%s: %s: for %q: %v", o.file, r.Alert, r.For, err)
					}
				}
				errs = append(errs, codefacts.CheckPromQL(o.file+": "+r.Alert, r.Expr, f.metrics)...)
			}
		}
		if n == 0 {
			fail("%s: no rules", o.file)
		}
	}
	return errs
}

func checkDeployment(d *appsv1.Deployment, cms map[string]*corev1.ConfigMap, f *facts) (*sidecar, []error) {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %s (%s): "+format, append([]any{d.Kind, d.Name, renderedFile}, args...)...))
	}
	tmpl := d.Spec.Template
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		fail("spec.selector.matchLabels is empty")
		return nil, errs
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			fail("the selector's %s=%s is not a label of the pod template", k, v)
		}
	}
	ps := tmpl.Spec

	// The native sidecar: an init container with restartPolicy Always.
	var sc *corev1.Container
	for i := range ps.InitContainers {
		if ps.InitContainers[i].Name == "sharetx" {
			sc = &ps.InitContainers[i]
		}
	}
	for _, c := range ps.Containers {
		if c.Name == "sharetx" || imageRepo(c.Image) == imageRepo(f.image) {
			fail("sharetx must run as a native sidecar (initContainers with restartPolicy: Always), not in containers: it must outlive the application at shutdown")
		}
	}
	if sc == nil {
		fail("no init container named sharetx")
		return nil, errs
	}
	if rp := sc.RestartPolicy; rp == nil || *rp != corev1.ContainerRestartPolicyAlways {
		fail("the sharetx init container has restartPolicy %v: without Always it is an ordinary init container that must exit before the app starts", rp)
	}
	if len(ps.Containers) == 0 {
		fail("no application container")
	}

	// Image and entrypoint: what `make image` builds from the Dockerfile.
	if imageRepo(sc.Image) != imageRepo(f.image) {
		fail("sharetx image %q is not the repository `make image` builds (%s)", sc.Image, f.image)
	}
	if !strings.Contains(f.docker.text, imageRepo(f.image)) {
		fail("the Dockerfile does not name the image `make image` builds (%s)", imageRepo(f.image))
	}
	if len(sc.Command) > 0 && strings.Join(sc.Command, " ") != strings.Join(f.docker.entrypoint, " ") {
		fail("sharetx command %v overrides the image's ENTRYPOINT %v", sc.Command, f.docker.entrypoint)
	}
	if ep := f.docker.entrypoint; len(ep) == 0 || !contains(f.docker.copyTo, ep[0]) {
		fail("the Dockerfile's ENTRYPOINT %v is not where a COPY puts the binary (%v)", ep, f.docker.copyTo)
	}

	// Arguments: real flags; --config is a file of a mounted ConfigMap.
	configPath := ""
	for i := 0; i < len(sc.Args); i++ {
		a := sc.Args[i]
		if !strings.HasPrefix(a, "-") {
			fail("argument %q: sharetx takes no positional arguments", a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := f.flags[name]; !ok {
			fail("argument %q: cmd/sharetx has no flag --%s", a, name)
			continue
		}
		if !hasVal && name != "check-config" && i+1 < len(sc.Args) {
			i++
			val = sc.Args[i]
		}
		if name == "config" {
			configPath = val
		}
		if name == "check-config" {
			fail("--check-config makes sharetx exit at once")
		}
	}
	if configPath == "" {
		fail("sharetx has no --config argument")
		return nil, errs
	}
	var cm *corev1.ConfigMap
	for _, vm := range sc.VolumeMounts {
		if !strings.HasPrefix(configPath, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		if !vm.ReadOnly {
			fail("volume mount %s is not readOnly", vm.MountPath)
		}
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = cms[v.ConfigMap.Name]
				if cm == nil {
					fail("volume %s names ConfigMap %s, which is not in configs/k8s", v.Name, v.ConfigMap.Name)
				}
			}
		}
	}
	if cm == nil {
		fail("--config=%s is not in a mounted ConfigMap", configPath)
		return nil, errs
	}
	key := strings.TrimPrefix(configPath[strings.LastIndex(configPath, "/"):], "/")
	text, ok := cm.Data[key]
	if !ok {
		fail("ConfigMap %s has no key %s (the file --config names)", cm.Name, key)
		return nil, errs
	}

	// Environment: every SHARETX_* is a real key; then the configuration
	// must load exactly as sharetx would load it.
	env, more := containerEnv(sc, cms, f)
	errs = append(errs, more...)
	dir, err := os.MkdirTemp("", "sharetx-k8s-")
	if err != nil {
		fail("%v", err)
		return nil, errs
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, key)
	os.WriteFile(path, []byte(text), 0o600)
	cfg, err := configs.Load(path, env)
	if err != nil {
		fail("the ConfigMap's sharetx configuration with the container's environment does not load: %v", err)
		return nil, errs
	}
	s := &sidecar{dep: d, c: sc, cfg: cfg, env: env, configPath: configPath}

	if len(cfg.Upstream.BootstrapServers) == 0 {
		fail("upstream.bootstrap_servers is empty: sharetx would start an embedded cluster instead of proxying a real one")
	}
	bhost, _, _ := net.SplitHostPort(cfg.Listen.Bootstrap)
	if ip := net.ParseIP(bhost); ip == nil || !ip.IsLoopback() {
		fail("listen.bootstrap %s: a sidecar binds loopback (only its pod's app connects)", cfg.Listen.Bootstrap)
	}
	mhost, _, _ := net.SplitHostPort(cfg.Metrics.Address)
	if cfg.Metrics.Address == "" || (mhost != "0.0.0.0" && mhost != "" && mhost != "::") {
		fail("metrics.address %q: the kubelet probes the pod IP, so it must bind all interfaces (0.0.0.0:port)", cfg.Metrics.Address)
	}
	metricsPort := portOf(cfg.Metrics.Address)
	if p := namedPort(sc, "metrics"); p != metricsPort {
		fail("container port \"metrics\" is %d, metrics.address serves %d", p, metricsPort)
	}
	for _, p := range []int{metricsPort, portOf(cfg.Listen.Bootstrap), cfg.Listen.BrokerPortBase} {
		if !f.docker.expose[p] {
			fail("port %d is not EXPOSEd in the Dockerfile", p)
		}
	}
	for _, p := range sc.Ports {
		if p.HostPort != 0 {
			fail("port %s has a hostPort: sharetx serves its own pod only", p.Name)
		}
	}

	// The app reaches Kafka through the sidecar.
	through := false
	for _, c := range ps.Containers {
		for _, e := range c.Env {
			for _, addr := range strings.Split(e.Value, ",") {
				h, p, err := net.SplitHostPort(strings.TrimSpace(addr))
				if err == nil && (h == "localhost" || h == "127.0.0.1") && p == strconv.Itoa(portOf(cfg.Listen.Bootstrap)) {
					through = true
				}
			}
		}
	}
	if !through {
		fail("no application container is pointed at the sidecar (an env value localhost:%d)", portOf(cfg.Listen.Bootstrap))
	}

	// Probes: liveness /healthz, readiness and startup /readyz, on the
	// metrics port, paths cmd/sharetx serves.
	for _, pr := range []struct {
		name, want string
		p          *corev1.Probe
	}{{"livenessProbe", "/healthz", sc.LivenessProbe}, {"readinessProbe", "/readyz", sc.ReadinessProbe}, {"startupProbe", "/readyz", sc.StartupProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			fail("sharetx has no %s.httpGet", pr.name)
			continue
		}
		g := pr.p.HTTPGet
		if !contains(f.paths, g.Path) {
			fail("%s path %q is not served by cmd/sharetx (it serves %v)", pr.name, g.Path, f.paths)
		} else if g.Path != pr.want {
			fail("%s path %q, want %s", pr.name, g.Path, pr.want)
		}
		port := g.Port.IntValue()
		if g.Port.Type == intstr.String {
			port = namedPort(sc, g.Port.StrVal)
		}
		if port == 0 || port != metricsPort {
			fail("%s port %s is not metrics.address's port %d", pr.name, g.Port.String(), metricsPort)
		}
		if g.Scheme != "" && g.Scheme != "HTTP" {
			fail("%s scheme %s: sharetx serves plain HTTP", pr.name, g.Scheme)
		}
	}

	// Resources: requests on every container, a memory limit on sharetx
	// (quantities were parsed by the decoding).
	for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				fail("container %s has no resources.requests.%s", c.Name, r)
			}
		}
		for r, lim := range c.Resources.Limits {
			if req, ok := c.Resources.Requests[r]; ok && lim.Cmp(req) < 0 {
				fail("container %s: limits.%s %s below requests %s", c.Name, r, lim.String(), req.String())
			}
		}
	}
	if _, ok := sc.Resources.Limits[corev1.ResourceMemory]; !ok {
		fail("sharetx has no memory limit")
	}

	// Security: non-root (the Dockerfile's uid), read-only root, no
	// privilege escalation, no capabilities.
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := sc.SecurityContext
	if csc == nil {
		fail("sharetx has no securityContext")
		csc = &corev1.SecurityContext{}
	}
	if !isTrue(csc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
		fail("sharetx: runAsNonRoot is not set")
	}
	uid := csc.RunAsUser
	if uid == nil {
		uid = psc.RunAsUser
	}
	dockerUID, _, _ := strings.Cut(f.docker.user, ":")
	if n, err := strconv.ParseInt(dockerUID, 10, 64); err != nil || n == 0 {
		fail("the Dockerfile's USER %q is not a numeric non-root uid (the kubelet can only verify runAsNonRoot on a number)", f.docker.user)
	} else if uid != nil && *uid != n {
		fail("sharetx runAsUser %d is not the image's USER %d", *uid, n)
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		fail("sharetx: readOnlyRootFilesystem is not true")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		fail("sharetx: allowPrivilegeEscalation is not false")
	}
	if isTrue(csc.Privileged) {
		fail("sharetx is privileged")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
		fail("sharetx: capabilities must drop ALL and add none")
	}
	base := f.docker.finalBase
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		fail("the Dockerfile's final base %s is not distroless/static or scratch", base)
	}

	// Drain: the pod's grace period covers the app's shutdown and then the
	// sidecar's shutdown_grace.
	if ps.TerminationGracePeriodSeconds == nil {
		fail("no terminationGracePeriodSeconds (the default 30 s leaves no room for the drain)")
	} else if g := time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second; g < cfg.Timeouts.ShutdownGrace+f.appBudget {
		fail("terminationGracePeriodSeconds %s < timeouts.shutdown_grace %s + %s for the application's own shutdown", g, cfg.Timeouts.ShutdownGrace, f.appBudget)
	}
	if cfg.Timeouts.ShutdownGrace <= 0 {
		fail("timeouts.shutdown_grace is 0: nothing would be drained")
	}
	return s, errs
}

// containerEnv returns the container's SHARETX_* variables as sharetx would
// see them; references are resolved to placeholders (or to the ConfigMap's
// value).
func containerEnv(c *corev1.Container, cms map[string]*corev1.ConfigMap, f *facts) ([]string, []error) {
	var env []string
	var errs []error
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "SHARETX_") {
			continue
		}
		if !f.envNames[e.Name] {
			errs = append(errs, fmt.Errorf("deployment.yaml: env %s is not a sharetx setting (sharetx would refuse to start); see docs/configuration.md", e.Name))
			continue
		}
		val := e.Value
		if vf := e.ValueFrom; vf != nil {
			switch {
			case vf.FieldRef != nil:
				val = "orders-worker-5d9c7b6f4-x2x7q"
			case vf.SecretKeyRef != nil:
				val = "placeholder-secret"
			case vf.ConfigMapKeyRef != nil:
				cm := cms[vf.ConfigMapKeyRef.Name]
				if cm == nil {
					errs = append(errs, fmt.Errorf("deployment.yaml: env %s: ConfigMap %s is not in configs/k8s", e.Name, vf.ConfigMapKeyRef.Name))
					continue
				}
				val = cm.Data[vf.ConfigMapKeyRef.Key]
			}
		}
		env = append(env, e.Name+"="+val)
	}
	return env, errs
}

// ---------------------------------------------------------------- helpers

func imageRepo(image string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

func namedPort(c *corev1.Container, name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isTrue(b *bool) bool { return b != nil && *b }

// ---------------------------------------------------------------- tests

func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readManifests(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	more, _ := filepath.Glob("sidecar/*.yaml")
	paths = append(paths, more...)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = raw
	}
	return files
}

func readAll(t *testing.T) (map[string][]byte, *facts) {
	t.Helper()
	f, err := readFacts(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return readManifests(t), f
}

// TestManifests: every document of every manifest here parses strictly and
// passes every check against the code.
func TestManifests(t *testing.T) {
	files, f := readAll(t)
	m, r, errs := checkFiles(files, f)
	for _, err := range errs {
		t.Error(err)
	}
	want := map[string]int{"ConfigMap": 1, "Deployment": 2, "Kustomization": 1, "Component": 1, "PodMonitor": 1, "PrometheusRule": 1}
	for k, n := range want {
		if got := len(m.all(k)); got != n {
			t.Errorf("%d %s documents, want %d", got, k, n)
		}
	}
	if len(r.objects) != 2 || len(r.all("ConfigMap")) != 1 || len(r.all("Deployment")) != 1 {
		t.Errorf("the kustomization renders %d objects, want the ConfigMap and the Deployment", len(r.objects))
	}
}

// TestChecksCatchBrokenManifests: each check can fail. Every case breaks
// the real manifests in one place and must be reported.
func TestChecksCatchBrokenManifests(t *testing.T) {
	files, f := readAll(t)
	cases := []struct {
		name, file, old, new, want string
	}{
		{"typo in a field", "sidecar/sidecar.yaml", "readinessProbe:", "readinesProbe:", `unknown field "readinesProbe"`},
		{"a value of the wrong type", "deployment.yaml", "replicas: 3", "replicas: three", "replicas"},
		{"not a quantity", "sidecar/sidecar.yaml", "memory: 128Mi", "memory: lots", "quantities must match"},
		{"typo in the kustomization", "kustomization.yaml", "resources:", "resource:", `unknown field "resource"`},
		{"workload not labelled for the sidecar", "deployment.yaml", `sharetx-sidecar: "true" # the sidecar`, `other: "true" # the sidecar`, "no init container named sharetx"},
		{"component targets other workloads", "sidecar/kustomization.yaml", "kind: Deployment\n      labelSelector: sharetx-sidecar=true", "kind: Deployment\n      labelSelector: sharetx-sidecar=yes", "no init container named sharetx"},
		{"component not used", "kustomization.yaml", "components:\n  - sidecar\n", "", "no init container named sharetx"},
		{"probe path not served", "sidecar/sidecar.yaml", "path: /healthz", "path: /health", "not served by cmd/sharetx"},
		{"probe on another port", "sidecar/sidecar.yaml", "containerPort: 9644", "containerPort: 9645", "metrics.address serves 9644"},
		{"unknown SHARETX_ variable", "sidecar/sidecar.yaml", "SHARETX_KIP1289_PROXY_ID", "SHARETX_KIP1289_PROXYID", "not a sharetx setting"},
		{"unknown flag", "sidecar/sidecar.yaml", "--config=", "--conf=", "no flag --conf"},
		{"invalid configuration", "sidecar/configmap.yaml", "client_acks: absorb", "client_acks: ignore", "kip1289.client_acks"},
		{"unknown configuration key", "sidecar/configmap.yaml", "shadow_partitions: 8", "shadow_partition: 8", "shadow_partition"},
		{"metrics on loopback", "sidecar/configmap.yaml", "address: 0.0.0.0:9644", "address: 127.0.0.1:9644", "must bind all interfaces"},
		{"embedded cluster", "sidecar/configmap.yaml", "- my-cluster-kafka-bootstrap.kafka.svc:9092", "[]", "upstream.bootstrap_servers is empty"},
		{"ordinary init container", "sidecar/sidecar.yaml", "restartPolicy: Always # native", "restartPolicy: OnFailure # native", "restartPolicy"},
		{"root", "sidecar/sidecar.yaml", "readOnlyRootFilesystem: true\n            capabilities:\n              drop: [\"ALL\"]\n          volumeMounts:", "readOnlyRootFilesystem: false\n            capabilities:\n              drop: [\"ALL\"]\n          volumeMounts:", "readOnlyRootFilesystem"},
		{"other image", "sidecar/sidecar.yaml", "image: ghcr.io/sharetx/sharetx:dev", "image: docker.io/someone/sharetx:dev", "not the repository `make image` builds"},
		{"no requests", "sidecar/sidecar.yaml", "cpu: 100m\n", "", "requests.cpu"},
		{"short grace period", "sidecar/sidecar.yaml", "terminationGracePeriodSeconds: 120", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds"},
		{"alert on a series that does not exist", "prometheusrule.yaml", "sharetx_upstream_ack_failures_total", "sharetx_upstream_ack_failure_total", "not registered"},
		{"alert on a label that does not exist", "prometheusrule.yaml", `{outcome="unverified"}`, `{result="unverified"}`, "has no label result"},
		{"PodMonitor selects other pods", "podmonitor.yaml", "matchLabels:\n      sharetx-sidecar: \"true\"", "matchLabels:\n      sharetx-sidecar: \"yes\"", "do not carry"},
		{"CRD in kustomization", "kustomization.yaml", "  - deployment.yaml\n", "  - deployment.yaml\n  - podmonitor.yaml\n", "must not list it"},
		{"unknown kind", "podmonitor.yaml", "kind: PodMonitor", "kind: ServiceMonitor", "not one this directory is checked for"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			broken := map[string][]byte{}
			for k, v := range files {
				broken[k] = v
			}
			orig := string(files[tc.file])
			if !strings.Contains(orig, tc.old) {
				t.Fatalf("%s no longer contains %q: update this case", tc.file, tc.old)
			}
			broken[tc.file] = []byte(strings.Replace(orig, tc.old, tc.new, 1))
			_, _, errs := checkFiles(broken, f)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("breaking %s (%q → %q) was not reported with %q; reported: %v", tc.file, tc.old, tc.new, tc.want, errs)
		})
	}
}

// TestDockerfileBuildRuns runs the Dockerfile's own go build command as
// written (only the output path changed) and checks the binary is static,
// then runs it the way the manifest does, with --check-config: the image's
// binary accepts the manifest's arguments, configuration file and
// environment. The container image itself is not built: this machine has no
// container engine.
func TestDockerfileBuildRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	files, f := readAll(t)
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "sharetx")
	cmdline := f.docker.build
	re := regexp.MustCompile(`-o\s+\S+`)
	if !re.MatchString(cmdline) {
		t.Fatalf("the Dockerfile's build has no -o: %s", cmdline)
	}
	for _, want := range []string{"CGO_ENABLED=0", "go build", "-trimpath", "./cmd/sharetx"} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("the Dockerfile's build lacks %s: %s", want, cmdline)
		}
	}
	cmdline = re.ReplaceAllString(cmdline, "-o "+out)
	// The command runs as the Dockerfile writes it, with the go on PATH.
	cmd := exec.Command("sh", "-c", cmdline)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(gobin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, b)
	}
	ef, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked (it has an ELF interpreter): distroless/static cannot run it")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	ef.Close()

	_, m, errs := checkFiles(files, f)
	for _, err := range errs {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range m.objects {
		switch v := o.v.(type) {
		case *appsv1.Deployment:
			dep = v
		case *corev1.ConfigMap:
			cms[o.name] = v
		}
	}
	sc, errs := checkDeployment(dep, cms, f)
	for _, err := range errs {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "sharetx.yaml")
	key := filepath.Base(sc.configPath)
	for _, cm := range cms {
		if text, ok := cm.Data[key]; ok {
			os.WriteFile(cfgFile, []byte(text), 0o600)
		}
	}
	args := []string{"--check-config"}
	for _, a := range sc.c.Args {
		args = append(args, strings.ReplaceAll(a, sc.configPath, cfgFile))
	}
	run := exec.Command(out, args...)
	run.Env = sc.env // only the manifest's SHARETX_* variables
	b, err := run.CombinedOutput()
	if err != nil || !bytes.Contains(b, []byte("configuration OK")) {
		t.Fatalf("sharetx %v with the manifest's environment: %v\n%s", args, err, b)
	}
}

// TestSidecarComponentOnAnyWorkload: the sidecar component, applied to a
// kustomization of its own (a StatefulSet and a Deployment labelled
// sharetx-sidecar: "true", and a Deployment that is not), adds the sidecar
// and its ConfigMap to the labelled workloads only, leaves their own
// containers as they were, and each patched pod template passes the checks
// the example Deployment passes.
func TestSidecarComponentOnAnyWorkload(t *testing.T) {
	files, f := readAll(t)
	app := func(kind, name, label string) string {
		return fmt.Sprintf(`apiVersion: apps/v1
kind: %s
metadata:
  name: %s
  labels: {%s}
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers:
        - name: main
          image: registry.example.com/%s:1
          env: [{name: BOOTSTRAP, value: "localhost:9092"}]
          resources: {requests: {cpu: 50m, memory: 64Mi}}
`, kind, name, label, name, name, name)
	}
	use := map[string][]byte{
		"kustomization.yaml": []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [jobs.yaml, orders.yaml, plain.yaml]\ncomponents: [sidecar]\n"),
		"jobs.yaml":          []byte(app("StatefulSet", "jobs", `sharetx-sidecar: "true"`)),
		"orders.yaml":        []byte(app("Deployment", "orders", `sharetx-sidecar: "true"`)),
		"plain.yaml":         []byte(app("Deployment", "plain", "")),
	}
	for name, b := range files {
		if strings.HasPrefix(name, "sidecar/") {
			use[name] = b
		}
	}
	out, err := render(use)
	if err != nil {
		t.Fatal(err)
	}
	cms := map[string]*corev1.ConfigMap{}
	pods := map[string]*corev1.PodTemplateSpec{}
	var patched []*appsv1.Deployment
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var head struct{ Kind string }
		if err := sigsyaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := sigsyaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			cms[cm.Name] = &cm
		case "Deployment":
			var d appsv1.Deployment
			if err := sigsyaml.UnmarshalStrict([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			pods[d.Name] = &d.Spec.Template
			patched = append(patched, &d)
		case "StatefulSet":
			var ss appsv1.StatefulSet
			if err := sigsyaml.UnmarshalStrict([]byte(doc), &ss); err != nil {
				t.Fatal(err)
			}
			pods[ss.Name] = &ss.Spec.Template
			// The checks are the Deployment's: the pod template is the same type.
			d := &appsv1.Deployment{ObjectMeta: ss.ObjectMeta, Spec: appsv1.DeploymentSpec{Selector: ss.Spec.Selector, Template: ss.Spec.Template}}
			d.Kind = "StatefulSet"
			patched = append(patched, d)
		default:
			t.Errorf("rendered a %s", head.Kind)
		}
	}
	if len(cms) != 1 || cms["sharetx-config"] == nil || len(pods) != 3 {
		t.Fatalf("rendered ConfigMaps %v and workloads %v, want sharetx-config and jobs, orders, plain", cms, pods)
	}
	if p := pods["plain"].Spec; len(p.InitContainers) != 0 || len(p.Volumes) != 0 || pods["plain"].Labels["sharetx-sidecar"] != "" {
		t.Errorf("the unlabelled Deployment was patched: %+v", p)
	}
	for _, d := range patched {
		if d.Name == "plain" {
			continue
		}
		ps := d.Spec.Template.Spec
		if len(ps.Containers) != 1 || ps.Containers[0].Name != "main" || ps.Containers[0].Image != "registry.example.com/"+d.Name+":1" {
			t.Errorf("%s %s: its own containers changed: %+v", d.Kind, d.Name, ps.Containers)
		}
		if _, errs := checkDeployment(d, cms, f); len(errs) > 0 {
			for _, err := range errs {
				t.Errorf("%s %s with the component: %v", d.Kind, d.Name, err)
			}
		}
	}
}
