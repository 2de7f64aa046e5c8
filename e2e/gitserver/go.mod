module github.com/gitops-rs/e2e/gitserver

go 1.25
