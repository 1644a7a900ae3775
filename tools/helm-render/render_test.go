// Tests of the Helm built-ins the renderer emulates, each against what Helm itself does.
package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestToYAMLQuotesWhatWouldChangeType(t *testing.T) {
	got := toYAML(map[string]interface{}{
		"b": "true", "n": "123", "e": "", "s": "plain", "f": float64(3), "l": []interface{}{"x", int64(1)},
	})
	want := "b: \"true\"\ne: \"\"\nf: 3\nl:\n  - x\n  - 1\nn: \"123\"\ns: plain"
	if got != want {
		t.Fatalf("toYaml:\n%s\nwant:\n%s", got, want)
	}
}

func TestCoalesceNullDeletesAndMapsMerge(t *testing.T) {
	defaults := map[string]interface{}{
		"a": map[string]interface{}{"x": 1.0, "y": 2.0},
		"b": "keep",
		"c": []interface{}{"d"},
	}
	user := map[string]interface{}{
		"a": map[string]interface{}{"y": nil, "z": 3.0},
		"c": []interface{}{"u"},
	}
	got := coalesce(user, defaults)
	want := map[string]interface{}{
		"a": map[string]interface{}{"x": 1.0, "z": 3.0},
		"b": "keep",
		"c": []interface{}{"u"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("coalesce = %v, want %v", got, want)
	}
}

func TestSetParsing(t *testing.T) {
	m := map[string]interface{}{}
	for _, s := range []string{"a.b=3,a.c=true", "l[1].name=x", "list={p,q}", `dotted\.key=v`, "z=007"} {
		if err := parseSet(s, m, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := parseSet("s=42", m, true); err != nil {
		t.Fatal(err)
	}
	want := map[string]interface{}{
		"a":          map[string]interface{}{"b": int64(3), "c": true},
		"l":          []interface{}{nil, map[string]interface{}{"name": "x"}},
		"list":       []interface{}{"p", "q"},
		"dotted.key": "v",
		"z":          "007",
		"s":          "42",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("--set = %#v, want %#v", m, want)
	}
	if err := parseSet("novalue", map[string]interface{}{}, false); err == nil {
		t.Fatal("a key without = must be an error")
	}
}

// writeChart lays out a throwaway chart with the given templates.
func writeChart(t *testing.T, values string, templates map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "Chart.yaml"),
		[]byte("apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: \"4.5\"\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(values), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "templates"), 0o755))
	for name, body := range templates {
		must(os.WriteFile(filepath.Join(dir, "templates", name), []byte(body), 0o644))
	}
	return dir
}

func TestRenderBuiltins(t *testing.T) {
	dir := writeChart(t, "replicas: 2\nname: web\nmsg: \"{{ .Release.Name }}-x\"\n", map[string]string{
		"_helpers.tpl": `{{- define "demo.name" -}}{{ .Chart.Name }}-{{ .Values.name }}{{- end -}}`,
		"cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "demo.name" . }}
  namespace: {{ .Release.Namespace }}
data:
  replicas: {{ .Values.replicas | quote }}
  tpl: {{ tpl .Values.msg . }}
  version: {{ .Chart.AppVersion }}
  kube: {{ .Capabilities.KubeVersion.Minor | quote }}
  pdb: {{ .Capabilities.APIVersions.Has "policy/v1" | quote }}
  missing: "{{ .Values.nothing }}"
`,
		"NOTES.txt": "release {{ .Release.Name }}\n",
	})
	values, err := LoadValues(dir, nil, []string{"replicas=5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(RenderOptions{ChartDir: dir, ReleaseName: "r1", Namespace: "ns", KubeVersion: "1.29.2"}, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Source: demo/templates/cm.yaml", "name: demo-web", "namespace: ns", `replicas: "5"`,
		"tpl: r1-x", "version: 4.5", `kube: "29"`, `pdb: "true"`, `missing: ""`,
	} {
		if !strings.Contains(out.Manifests, want) {
			t.Errorf("output lacks %q:\n%s", want, out.Manifests)
		}
	}
	if out.Notes != "release r1\n" {
		t.Errorf("NOTES = %q", out.Notes)
	}
}

func TestRequiredAndFailGiveHelmsMessage(t *testing.T) {
	dir := writeChart(t, "image: \"\"\n", map[string]string{
		"_helpers.tpl": `{{- define "demo.image" -}}{{ required "image is required: set image" .Values.image }}{{- end -}}`,
		"a.yaml":       "x: {{ include \"demo.image\" . }}\n",
	})
	values, err := LoadValues(dir, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Render(RenderOptions{ChartDir: dir, ReleaseName: "r", Namespace: "d", KubeVersion: "1.30.0"}, values)
	if err == nil || !strings.HasPrefix(err.Error(), "execution error at (demo/templates/_helpers.tpl:") ||
		!strings.HasSuffix(err.Error(), "): image is required: set image") {
		t.Fatalf("error = %v", err)
	}

	dir = writeChart(t, "n: 1\n", map[string]string{"a.yaml": `{{ if gt (int .Values.n) 0 }}{{ fail "n must be 0" }}{{ end }}`})
	values, _ = LoadValues(dir, nil, nil, nil)
	_, err = Render(RenderOptions{ChartDir: dir, ReleaseName: "r", Namespace: "d", KubeVersion: "1.30.0"}, values)
	if err == nil || !strings.HasSuffix(err.Error(), "): n must be 0") {
		t.Fatalf("error = %v", err)
	}
}

func TestRejectsDocumentsThatAreNotObjects(t *testing.T) {
	dir := writeChart(t, "{}\n", map[string]string{"a.yaml": "kind: ConfigMap\nfoo: [\n"})
	values, _ := LoadValues(dir, nil, nil, nil)
	if _, err := Render(RenderOptions{ChartDir: dir, ReleaseName: "r", Namespace: "d", KubeVersion: "1.30.0"}, values); err == nil {
		t.Fatal("invalid YAML must fail the render")
	}
}

func TestKubeVersionConstraint(t *testing.T) {
	dir := writeChart(t, "{}\n", map[string]string{"a.yaml": ""})
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"),
		[]byte("apiVersion: v2\nname: demo\nversion: 1.0.0\nkubeVersion: \">=1.27.0-0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	values, _ := LoadValues(dir, nil, nil, nil)
	if _, err := Render(RenderOptions{ChartDir: dir, ReleaseName: "r", Namespace: "d", KubeVersion: "1.30.0"}, values); err != nil {
		t.Fatalf("1.30 should satisfy >=1.27: %v", err)
	}
	_, err := Render(RenderOptions{ChartDir: dir, ReleaseName: "r", Namespace: "d", KubeVersion: "1.26.3"}, values)
	if err == nil || !strings.Contains(err.Error(), "incompatible with Kubernetes v1.26.3") {
		t.Fatalf("1.26 must be refused, got %v", err)
	}
}
