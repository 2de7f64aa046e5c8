// Command flux-buildtime times the build half of a Flux kustomize-controller reconcile, as
// the controller's code does it, for one artifact: download, digest check and extraction
// with the fluxcd/pkg/http/fetch ArchiveFetcher into a fresh temporary directory, then the
// generated kustomization.yaml, the kustomize build in Flux's secure filesystem, the YAML
// rendering and the decoding into unstructured objects. It is rflux's benchmark harness
// (issue 15; see scripts/bench-buildtime.sh), not part of Flux.
//
// Each timed iteration prints one JSON line with its phase times in milliseconds.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/http/fetch"
	"github.com/fluxcd/pkg/kustomize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"github.com/fluxcd/pkg/tar"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// sample is one timed iteration (all times in milliseconds).
type sample struct {
	Side     string  `json:"side"`
	Case     string  `json:"case"`
	Iter     int     `json:"iter"`
	Fetch    float64 `json:"fetch_ms"`
	Generate float64 `json:"generate_ms"`
	Build    float64 `json:"build_ms"`
	Yaml     float64 `json:"yaml_ms"`
	Decode   float64 `json:"decode_ms"`
	Total    float64 `json:"total_ms"`
	Cleanup  float64 `json:"cleanup_ms"`
	Objects  int     `json:"objects"`
	Bytes    int     `json:"bytes"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// kustomization is a plain Flux Kustomization: only spec.path (and the required fields)
// set, as the controller hands it to the generator.
func kustomization(path string) (unstructured.Unstructured, error) {
	obj := &kustomizev1.Kustomization{
		TypeMeta:   metav1.TypeMeta{APIVersion: kustomizev1.GroupVersion.String(), Kind: kustomizev1.KustomizationKind},
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "flux-system"},
		Spec: kustomizev1.KustomizationSpec{
			Path:      path,
			Interval:  metav1.Duration{Duration: 10 * time.Minute},
			Prune:     true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "bench"},
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return unstructured.Unstructured{}, err
	}
	return unstructured.Unstructured{Object: m}, nil
}

func once(url, digest, path string) (sample, error) {
	var s sample
	start := time.Now()
	tmpDir, err := os.MkdirTemp("", "kustomization-")
	if err != nil {
		return s, err
	}
	if tmpDir, err = filepath.Abs(tmpDir); err != nil {
		return s, err
	}
	defer os.RemoveAll(tmpDir)

	// The controller makes a new fetcher per reconcile, with its default 9 retries.
	fetcher := fetch.New(
		fetch.WithRetries(9),
		fetch.WithMaxDownloadSize(tar.UnlimitedUntarSize),
		fetch.WithUntar(tar.WithMaxUntarSize(tar.UnlimitedUntarSize)),
	)
	if err := fetcher.Fetch(url, digest, tmpDir); err != nil {
		return s, fmt.Errorf("fetch: %w", err)
	}
	t := time.Now()
	s.Fetch = ms(t.Sub(start))

	dirPath, err := securejoin.SecureJoin(tmpDir, path)
	if err != nil {
		return s, err
	}
	if _, err := os.Stat(dirPath); err != nil {
		return s, fmt.Errorf("kustomization path not found: %w", err)
	}
	k, err := kustomization(path)
	if err != nil {
		return s, err
	}
	if _, err := kustomize.NewGenerator(tmpDir, k).WriteFile(dirPath); err != nil {
		return s, fmt.Errorf("generate: %w", err)
	}
	t2 := time.Now()
	s.Generate = ms(t2.Sub(t))

	// The controller's default: remote bases allowed (--no-remote-bases=false).
	m, err := kustomize.SecureBuild(tmpDir, dirPath, true)
	if err != nil {
		return s, fmt.Errorf("kustomize build failed: %w", err)
	}
	for _, res := range m.Resources() {
		if res.GetName() == "" || res.GetKind() == "" || res.GetApiVersion() == "" {
			return s, fmt.Errorf("object without apiVersion, kind or name: %v", res.String())
		}
	}
	t3 := time.Now()
	s.Build = ms(t3.Sub(t2))

	resources, err := m.AsYaml()
	if err != nil {
		return s, fmt.Errorf("kustomize build failed: %w", err)
	}
	t4 := time.Now()
	s.Yaml = ms(t4.Sub(t3))

	objects, err := ssautil.ReadObjects(bytes.NewReader(resources))
	if err != nil {
		return s, fmt.Errorf("decode: %w", err)
	}
	t5 := time.Now()
	s.Decode = ms(t5.Sub(t4))
	s.Total = ms(t5.Sub(start))
	s.Objects = len(objects)
	s.Bytes = len(resources)

	if err := os.RemoveAll(tmpDir); err != nil {
		return s, err
	}
	s.Cleanup = ms(time.Since(t5))
	return s, nil
}

func main() {
	url := flag.String("url", "", "artifact URL (tar.gz)")
	digest := flag.String("digest", "", "artifact digest (sha256:<hex>)")
	path := flag.String("path", "./", "the Kustomization's spec.path")
	name := flag.String("case", "", "case name echoed in the output")
	k := flag.Int("k", 7, "timed iterations")
	warmup := flag.Int("warmup", 1, "untimed iterations first")
	flag.Parse()
	if *url == "" || *digest == "" {
		fmt.Fprintln(os.Stderr, "usage: flux-buildtime -url URL -digest sha256:HEX [-path P] [-k N] [-warmup N] [-case NAME]")
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for i := -*warmup; i < *k; i++ {
		s, err := once(*url, *digest, *path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flux-buildtime: %s: %v\n", *name, err)
			os.Exit(1)
		}
		if i < 0 {
			continue
		}
		s.Side, s.Case, s.Iter = "flux", *name, i
		if err := enc.Encode(s); err != nil {
			os.Exit(1)
		}
	}
}
