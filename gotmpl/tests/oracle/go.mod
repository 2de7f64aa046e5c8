module rflux.dev/gotmpl-oracle

go 1.26

require (
	github.com/go-task/slim-sprig/v3 v3.0.0
	github.com/gosimple/slug v1.15.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/gosimple/unidecode v1.0.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)
