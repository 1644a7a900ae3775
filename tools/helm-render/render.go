// The template engine: one template set holding every file under templates/ (so `define`s are
// shared), Helm's function map on top of sprig's, and Helm's output conventions (a "# Source:"
// line per document, "<no value>" printed as nothing, errors as "execution error at (...)").
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

// RenderOptions are what `helm template` takes besides values.
type RenderOptions struct {
	ChartDir    string
	ReleaseName string
	Namespace   string
	KubeVersion string   // "1.30.0"
	APIVersions []string // extra group/versions for .Capabilities.APIVersions
}

// Rendered is a chart's output: every manifest as one multi-document stream, and NOTES.txt.
type Rendered struct {
	Manifests string
	Notes     string
}

// ChartMeta is .Chart (Helm's chart.Metadata field names).
type ChartMeta struct {
	Name        string            `yaml:"name"`
	Version     string            `yaml:"version"`
	AppVersion  string            `yaml:"appVersion"`
	APIVersion  string            `yaml:"apiVersion"`
	Description string            `yaml:"description"`
	Type        string            `yaml:"type"`
	KubeVersion string            `yaml:"kubeVersion"`
	Home        string            `yaml:"home"`
	Keywords    []string          `yaml:"keywords"`
	Annotations map[string]string `yaml:"annotations"`
}

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

// Has reports whether an API version ("policy/v1") or kind ("apps/v1/Deployment") is available.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// Capabilities is .Capabilities.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion map[string]string
}

// Files is .Files: the chart's files outside templates/, by path relative to the chart.
type Files map[string][]byte

// Get returns a file's contents, "" when absent (as Helm does).
func (f Files) Get(name string) string { return string(f[name]) }

var builtinAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "policy/v1",
	"networking.k8s.io/v1", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1",
	"scheduling.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
	"admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "certificates.k8s.io/v1",
	"events.k8s.io/v1", "node.k8s.io/v1",
}

const recursionMax = 1000

// Render executes every template of the chart with the merged values.
func Render(opts RenderOptions, values map[string]interface{}) (*Rendered, error) {
	meta, err := loadChartMeta(opts.ChartDir)
	if err != nil {
		return nil, err
	}
	templates, err := loadTemplates(opts.ChartDir, meta.Name)
	if err != nil {
		return nil, err
	}
	files, err := loadFiles(opts.ChartDir)
	if err != nil {
		return nil, err
	}
	caps, err := capabilities(opts)
	if err != nil {
		return nil, err
	}
	if err := checkKubeVersion(meta, caps); err != nil {
		return nil, err
	}

	root := template.New("gotpl").Option("missingkey=zero")
	root.Funcs(funcMap(root))
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := root.New(name).Parse(templates[name]); err != nil {
			return nil, cleanError(err)
		}
	}

	release := map[string]interface{}{
		"Name": opts.ReleaseName, "Namespace": opts.Namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1,
	}
	// Execute in Helm's order (deepest paths first, then reverse lexical), so that the first
	// failure reported is the one Helm reports; print in name order.
	order := append([]string(nil), names...)
	sort.SliceStable(order, func(i, j int) bool {
		di, dj := strings.Count(order[i], "/"), strings.Count(order[j], "/")
		if di != dj {
			return di > dj
		}
		return order[i] > order[j]
	})
	outputs := map[string]string{}
	rendered := &Rendered{}
	for _, name := range order {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue // partials: defines only
		}
		top := map[string]interface{}{
			"Values":       values,
			"Release":      release,
			"Chart":        meta,
			"Capabilities": caps,
			"Files":        files,
			"Template":     map[string]interface{}{"Name": name, "BasePath": meta.Name + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, top); err != nil {
			return nil, cleanError(err)
		}
		out := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			rendered.Notes = out
			continue
		}
		outputs[name] = out
	}
	var manifests strings.Builder
	for _, name := range names {
		out, ok := outputs[name]
		if !ok {
			continue
		}
		docs, err := splitManifests(name, out)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			fmt.Fprintf(&manifests, "---\n# Source: %s\n%s\n", name, d)
		}
	}
	rendered.Manifests = manifests.String()
	return rendered, nil
}

func loadChartMeta(dir string) (*ChartMeta, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	meta := &ChartMeta{}
	if err := yaml.Unmarshal(data, meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if meta.Name == "" || meta.Version == "" || meta.APIVersion == "" {
		return nil, errors.New("Chart.yaml: apiVersion, name and version are required")
	}
	return meta, nil
}

// loadTemplates reads templates/** keyed "<chart>/templates/<path>", as Helm names them.
func loadTemplates(dir, chart string) (map[string]string, error) {
	out := map[string]string{}
	root := filepath.Join(dir, "templates")
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[chart+"/"+filepath.ToSlash(rel)] = string(data)
		return nil
	})
	return out, err
}

// loadFiles reads the chart's other files for .Files (values, Chart.yaml and templates excluded).
func loadFiles(dir string) (Files, error) {
	files := Files{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if rel == "templates" || rel == "charts" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "Chart.yaml" || rel == "values.yaml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	return files, err
}

func capabilities(opts RenderOptions) (*Capabilities, error) {
	v := strings.TrimPrefix(opts.KubeVersion, "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return nil, fmt.Errorf("--kube-version %q: want MAJOR.MINOR[.PATCH]", opts.KubeVersion)
	}
	apis := append(VersionSet{}, builtinAPIVersions...)
	apis = append(apis, opts.APIVersions...)
	return &Capabilities{
		KubeVersion: KubeVersion{Version: "v" + v, Major: parts[0], Minor: parts[1], GitVersion: "v" + v},
		APIVersions: apis,
		HelmVersion: map[string]string{"Version": "v3.16.0"},
	}, nil
}

// checkKubeVersion refuses a cluster version outside Chart.yaml's kubeVersion, as Helm does.
func checkKubeVersion(meta *ChartMeta, caps *Capabilities) error {
	if meta.KubeVersion == "" {
		return nil
	}
	compare := sprig.GenericFuncMap()["semverCompare"].(func(string, string) (bool, error))
	ok, err := compare(meta.KubeVersion, caps.KubeVersion.Version)
	if err != nil {
		return fmt.Errorf("Chart.yaml kubeVersion %q: %v", meta.KubeVersion, err)
	}
	if !ok {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
			meta.KubeVersion, caps.KubeVersion.Version)
	}
	return nil
}

// funcMap is sprig's text functions without env access, plus Helm's own.
func funcMap(root *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	included := map[string]int{}
	f["include"] = func(name string, data interface{}) (string, error) {
		if included[name] > recursionMax {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		included[name]++
		defer func() { included[name]-- }()
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %v", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["required"] = func(msg string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(msg)
		}
		if s, ok := val.(string); ok && s == "" {
			return val, errors.New(msg)
		}
		return val, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	f["toYaml"] = toYAML
	f["fromYaml"] = func(s string) map[string]interface{} {
		v, err := yamlToJSONValue([]byte(s))
		if err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		m, _ := v.(map[string]interface{})
		if m == nil {
			m = map[string]interface{}{}
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	// No cluster to ask: lookup finds nothing, as under `helm template`.
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return f
}

// toYAML marshals like sigs.k8s.io/yaml (Helm's toYaml): through JSON, keys sorted, 2-space
// indentation, no trailing newline; "" on error.
func toYAML(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		return ""
	}
	clearStyle(&node)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return ""
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// clearStyle drops the flow style JSON input gives every node, so the output is block YAML.
func clearStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style &^= yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		clearStyle(c)
	}
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitManifests splits one template's output into documents, drops empty ones and checks each
// is a Kubernetes object, as Helm does before it sorts and installs them.
func splitManifests(name, out string) ([]string, error) {
	var docs []string
	for _, d := range docSeparator.Split(out, -1) {
		trimmed := strings.TrimSpace(d)
		if trimmed == "" || onlyComments(trimmed) {
			continue
		}
		var obj map[string]interface{}
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			return nil, fmt.Errorf("YAML parse error on %s: %v", name, err)
		}
		meta, _ := obj["metadata"].(map[string]interface{})
		if obj["apiVersion"] == nil || obj["kind"] == nil || meta == nil || meta["name"] == nil {
			return nil, fmt.Errorf("%s: a document without apiVersion, kind or metadata.name", name)
		}
		docs = append(docs, strings.Trim(d, "\n"))
	}
	return docs, nil
}

func onlyComments(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

var execError = regexp.MustCompile(`^template: ([^:]+:\d+:\d+): executing "[^"]*" at <[^>]*>: error calling \w+: (.*)$`)

// cleanError turns Go's template errors into Helm's "execution error at (file:line:col): msg".
func cleanError(err error) error {
	msg := err.Error()
	// include/tpl nest errors; the innermost call carries the user's message.
	for {
		m := execError.FindStringSubmatch(msg)
		if m == nil {
			break
		}
		inner := m[2]
		if execError.MatchString(inner) {
			msg = inner
			continue
		}
		return fmt.Errorf("execution error at (%s): %s", m[1], inner)
	}
	return errors.New(msg)
}
