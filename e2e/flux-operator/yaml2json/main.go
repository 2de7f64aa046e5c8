// Command flux-operator-yaml2json reads multi-document YAML on stdin and writes one JSON value
// per line to stdout, one line per document in input order (an empty or comment-only document
// gives `null`). It converts with sigs.k8s.io/yaml, the library flux-operator's CLI prints its
// objects with, so the conversion is exact for that output. Documents are separated by lines
// that are exactly `---` (what sigs.k8s.io/yaml printers and the CLI emit). Input is bounded.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxInput bounds what is read from stdin.
const maxInput = 64 << 20

func main() {
	data, err := io.ReadAll(io.LimitReader(os.Stdin, maxInput+1))
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading stdin: %v\n", err)
		os.Exit(1)
	}
	if len(data) > maxInput {
		fmt.Fprintf(os.Stderr, "input exceeds %d bytes\n", maxInput)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for i, doc := range splitDocuments(string(data)) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			out.Flush()
			fmt.Fprintf(os.Stderr, "document %d: %v\n", i+1, err)
			os.Exit(1)
		}
		out.Write(js)
		out.WriteByte('\n')
	}
}

// splitDocuments cuts the input at lines that are exactly `---`. A separator at the very
// start does not open an empty first document.
func splitDocuments(text string) []string {
	var docs []string
	var cur strings.Builder
	started := false
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.TrimRight(line, "\r\n") == "---" {
			if started {
				docs = append(docs, cur.String())
			}
			cur.Reset()
			started = true
			continue
		}
		if line != "" {
			started = true
		}
		cur.WriteString(line)
	}
	if started {
		docs = append(docs, cur.String())
	}
	return docs
}
