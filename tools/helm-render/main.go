// helm-render renders a Helm chart offline the way `helm template` does, for the chart tests:
// Go's text/template with the sprig functions (Helm's engine) plus Helm's own built-ins
// (.Values, .Release, .Chart, .Capabilities, .Template, include, tpl, required, fail, toYaml, ...).
// Only what helm/hap uses is implemented; anything else fails loudly rather than rendering wrong.
//
// Build (GOPATH mode, Debian's golang-go + golang-github-masterminds-sprig-dev + golang-gopkg-yaml.v3-dev):
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o helm-render ./tools/helm-render
//
// Usage:
//
//	helm-render [--name R] [--namespace NS] [-f values.yaml]... [--set k=v]... [--set-string k=v]...
//	            [--kube-version 1.30.0] [--api-versions group/version]... [--values-out FILE]
//	            [--notes-out FILE] CHART_DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var valueFiles, sets, setStrings, apiVersions stringList
	name := flag.String("name", "release-name", "release name (.Release.Name)")
	namespace := flag.String("namespace", "default", "release namespace (.Release.Namespace)")
	kubeVersion := flag.String("kube-version", "1.30.0", "Kubernetes version for .Capabilities.KubeVersion")
	valuesOut := flag.String("values-out", "", "write the merged values as JSON to this file")
	notesOut := flag.String("notes-out", "", "write the rendered NOTES.txt to this file")
	flag.Var(&valueFiles, "f", "values file (repeatable; later files win)")
	flag.Var(&valueFiles, "values", "same as -f")
	flag.Var(&sets, "set", "set a value on the command line: a.b[0].c=v (repeatable; comma separates several)")
	flag.Var(&setStrings, "set-string", "like --set, the value always a string")
	flag.Var(&apiVersions, "api-versions", "an extra API version for .Capabilities.APIVersions (repeatable)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: helm-render [flags] CHART_DIR\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}

	opts := RenderOptions{
		ChartDir:    flag.Arg(0),
		ReleaseName: *name,
		Namespace:   *namespace,
		KubeVersion: *kubeVersion,
		APIVersions: apiVersions,
	}
	values, err := LoadValues(opts.ChartDir, valueFiles, sets, setStrings)
	if err != nil {
		fail(err)
	}
	if *valuesOut != "" {
		if err := WriteJSON(*valuesOut, values); err != nil {
			fail(err)
		}
	}
	out, err := Render(opts, values)
	if err != nil {
		fail(err)
	}
	if *notesOut != "" {
		if err := os.WriteFile(*notesOut, []byte(out.Notes), 0o644); err != nil {
			fail(err)
		}
	}
	fmt.Print(out.Manifests)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	os.Exit(1)
}
