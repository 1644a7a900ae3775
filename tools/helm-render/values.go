// Values as Helm builds them: the chart's values.yaml, coalesced with each -f file in order, then
// each --set. Numbers from YAML files become float64 (Helm goes YAML → JSON → Go), numbers from
// --set become int64 (Helm's strvals), and a null deletes the key it overrides.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadValues merges the chart defaults with the user's files and --set/--set-string values.
func LoadValues(chartDir string, files, sets, setStrings []string) (map[string]interface{}, error) {
	base, err := readValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	user := map[string]interface{}{}
	for _, f := range files {
		v, err := readValuesFile(f)
		if err != nil {
			return nil, err
		}
		user = mergeMaps(user, v)
	}
	for _, s := range sets {
		if err := parseSet(s, user, false); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %v", err)
		}
	}
	for _, s := range setStrings {
		if err := parseSet(s, user, true); err != nil {
			return nil, fmt.Errorf("failed parsing --set-string data: %v", err)
		}
	}
	return coalesce(user, base), nil
}

func readValuesFile(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := yamlToJSONValue(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: values must be a mapping", path)
	}
	return m, nil
}

// yamlToJSONValue decodes YAML the way sigs.k8s.io/yaml does for Helm: through JSON, so every
// number is a float64 and every map is map[string]interface{}.
func yamlToJSONValue(data []byte) (interface{}, error) {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	j, err := json.Marshal(jsonable(raw))
	if err != nil {
		return nil, err
	}
	var out interface{}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// jsonable turns yaml.v3's map[interface{}]interface{} (non-string keys) into string-keyed maps.
func jsonable(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = jsonable(e)
		}
		return out
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = jsonable(e)
		}
		return out
	}
	return v
}

// mergeMaps overlays src on dst (later -f files win); nulls are kept so coalesce can delete.
func mergeMaps(dst, src map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce fills user values with chart defaults. A user null removes the default's key, as in
// Helm; maps merge recursively, anything else (lists included) replaces the default.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, dv := range defaults {
		uv, set := user[k]
		switch {
		case !set:
			out[k] = dv
		case uv == nil:
			// deleted
		default:
			um, uok := uv.(map[string]interface{})
			dm, dok := dv.(map[string]interface{})
			if uok && dok {
				out[k] = coalesce(um, dm)
			} else {
				out[k] = dropNulls(uv)
			}
		}
	}
	for k, uv := range user {
		if _, inDefaults := defaults[k]; !inDefaults && uv != nil {
			out[k] = dropNulls(uv)
		}
	}
	return out
}

func dropNulls(v interface{}) interface{} {
	m, ok := v.(map[string]interface{})
	if !ok {
		return v
	}
	out := map[string]interface{}{}
	for k, e := range m {
		if e != nil {
			out[k] = dropNulls(e)
		}
	}
	return out
}

// parseSet applies one --set argument: comma-separated key=value pairs; keys are dotted paths
// with optional [index] parts; values may be {a,b} lists. Backslash escapes a comma or dot.
func parseSet(arg string, into map[string]interface{}, asString bool) error {
	for _, pair := range splitUnescaped(arg, ',', true) {
		if pair == "" {
			continue
		}
		eq := strings.IndexByte(pair, '=')
		if eq < 0 {
			return fmt.Errorf("key %q has no value", pair)
		}
		key, raw := pair[:eq], pair[eq+1:]
		var value interface{}
		if !asString && strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			var list []interface{}
			for _, e := range strings.Split(raw[1:len(raw)-1], ",") {
				list = append(list, typedValue(e))
			}
			value = list
		} else if asString {
			value = unescape(raw)
		} else {
			value = typedValue(unescape(raw))
		}
		if err := setPath(into, splitUnescaped(key, '.', false), value); err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
	}
	return nil
}

// splitUnescaped splits on sep outside backslash escapes and, for lists, outside {...}.
func splitUnescaped(s string, sep byte, braces bool) []string {
	var parts []string
	var cur strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			if sep == '.' {
				cur.WriteByte(s[i+1])
			} else {
				cur.WriteByte(c)
				cur.WriteByte(s[i+1])
			}
			i++
		case braces && c == '{':
			depth++
			cur.WriteByte(c)
		case braces && c == '}':
			depth--
			cur.WriteByte(c)
		case c == sep && depth == 0:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}

func unescape(s string) string { return strings.ReplaceAll(s, `\,`, ",") }

// typedValue follows Helm's strvals: integers, booleans and null are typed, the rest are strings.
func typedValue(s string) interface{} {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if len(s) > 1 && s[0] == '0' {
		return s // leading zero: a string, as in Helm
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// setPath stores value at path, creating maps and list slots; "name[2]" indexes a list.
func setPath(m map[string]interface{}, path []string, value interface{}) error {
	key := path[0]
	idx := -1
	if open := strings.IndexByte(key, '['); open >= 0 && strings.HasSuffix(key, "]") {
		n, err := strconv.Atoi(key[open+1 : len(key)-1])
		if err != nil || n < 0 {
			return fmt.Errorf("bad list index in %q", key)
		}
		key, idx = key[:open], n
	}
	if key == "" {
		return fmt.Errorf("empty key")
	}
	if idx < 0 {
		if len(path) == 1 {
			m[key] = value
			return nil
		}
		child, ok := m[key].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			m[key] = child
		}
		return setPath(child, path[1:], value)
	}
	list, _ := m[key].([]interface{})
	for len(list) <= idx {
		list = append(list, nil)
	}
	if len(path) == 1 {
		list[idx] = value
	} else {
		child, ok := list[idx].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			list[idx] = child
		}
		if err := setPath(child, path[1:], value); err != nil {
			return err
		}
	}
	m[key] = list
	return nil
}

// WriteJSON writes v as indented JSON (the merged values, for schema validation by the tests).
func WriteJSON(path string, v interface{}) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
