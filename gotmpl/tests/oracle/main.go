// Command gotmpl-oracle renders test cases with Go's text/template and the
// function map Flux Operator gives ResourceSet templates, for the rflux-gotmpl
// oracle test. Input (stdin): a JSON array of {"template": "...", "inputs": {...}}
// (inputs may be absent or null). Output (stdout): a JSON array of
// {"output": "...", "error": "..."}, one per case, in order.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"text/template"

	sprig "github.com/go-task/slim-sprig/v3"
	"github.com/gosimple/slug"
	"sigs.k8s.io/yaml"
)

type testCase struct {
	Template string          `json:"template"`
	Inputs   json.RawMessage `json:"inputs"`
}

type result struct {
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

// normalize turns json.Number values into int64 (whole numbers that fit) or
// float64, as Kubernetes' JSON decoding does.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
		return t
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, err := t.Float64()
		if err != nil {
			return math.NaN()
		}
		return f
	}
	return v
}

func toYAML(v any) string {
	s, err := mustToYAML(v)
	if err != nil {
		return ""
	}
	return s
}

func mustToYAML(v any) (string, error) {
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

func render(c testCase) result {
	var inputSet map[string]any
	if len(c.Inputs) > 0 && string(c.Inputs) != "null" {
		dec := json.NewDecoder(bytes.NewReader(c.Inputs))
		dec.UseNumber()
		if err := dec.Decode(&inputSet); err != nil {
			return result{Error: "bad inputs: " + err.Error()}
		}
		normalize(inputSet)
	}
	funcs := template.FuncMap{
		"slugify":    slug.Make,
		"inputs":     func() any { return inputSet },
		"toYaml":     toYAML,
		"mustToYaml": mustToYAML,
	}
	tp, err := template.New("resourceset").
		Delims("<<", ">>").
		Funcs(sprig.HermeticTxtFuncMap()).
		Funcs(funcs).
		Option("missingkey=error").
		Parse(c.Template)
	if err != nil {
		return result{Error: err.Error()}
	}
	var b strings.Builder
	if err := tp.Execute(&b, nil); err != nil {
		return result{Output: b.String(), Error: err.Error()}
	}
	return result{Output: b.String()}
}

func main() {
	slug.MaxLength = 63
	slug.EnableSmartTruncate = true
	var cases []testCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "decode cases:", err)
		os.Exit(2)
	}
	out := make([]result, 0, len(cases))
	for _, c := range cases {
		out = append(out, render(c))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "encode results:", err)
		os.Exit(2)
	}
}
