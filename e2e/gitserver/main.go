// Command rflux-gitserver serves git repositories for the rflux e2e tests.
//
// It runs `git http-backend` (smart HTTP, protocol v2) through net/http/cgi
// behind up to three listeners:
//
//   - plain HTTP: anonymous access; credentials, when sent, must be valid;
//   - HTTPS: basic auth (users file) or a bearer token (tokens file) required;
//   - HTTPS with mutual TLS: a client certificate signed by -client-ca required.
//
// Every listener may be given as 127.0.0.1:0; the bound ports are written as
// JSON to -ports-file once all listeners are open.
package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type config struct {
	root      string
	backend   string
	httpAddr  string
	httpsAddr string
	mtlsAddr  string
	certFile  string
	keyFile   string
	clientCA  string
	usersFile string
	tokenFile string
	portsFile string
}

type credentials struct {
	users  map[string]string
	tokens []string
}

type mode int

const (
	modeHTTP mode = iota
	modeHTTPS
	modeMTLS
)

func (m mode) String() string {
	switch m {
	case modeHTTP:
		return "http"
	case modeHTTPS:
		return "https"
	default:
		return "mtls"
	}
}

func main() {
	var c config
	flag.StringVar(&c.root, "root", "", "directory holding the bare repositories (GIT_PROJECT_ROOT)")
	flag.StringVar(&c.backend, "backend", "", "path of git-http-backend (default: from `git --exec-path`)")
	flag.StringVar(&c.httpAddr, "http", "", "plain HTTP listen address (empty: off)")
	flag.StringVar(&c.httpsAddr, "https", "", "HTTPS listen address, auth required (empty: off)")
	flag.StringVar(&c.mtlsAddr, "mtls", "", "HTTPS listen address, client certificate required (empty: off)")
	flag.StringVar(&c.certFile, "cert", "", "server certificate (PEM)")
	flag.StringVar(&c.keyFile, "key", "", "server private key (PEM)")
	flag.StringVar(&c.clientCA, "client-ca", "", "CA bundle that signs client certificates (PEM)")
	flag.StringVar(&c.usersFile, "users", "", "file of user:password lines")
	flag.StringVar(&c.tokenFile, "tokens", "", "file of bearer tokens, one per line")
	flag.StringVar(&c.portsFile, "ports-file", "", "write the bound ports as JSON here")
	flag.Parse()
	if err := run(c); err != nil {
		log.Fatalf("rflux-gitserver: %v", err)
	}
}

func run(c config) error {
	if c.root == "" {
		return errors.New("-root is required")
	}
	root, err := filepath.Abs(c.root)
	if err != nil {
		return err
	}
	c.root = root
	if c.backend == "" {
		out, err := exec.Command("git", "--exec-path").Output()
		if err != nil {
			return fmt.Errorf("git --exec-path: %w", err)
		}
		c.backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	}
	creds, err := loadCredentials(c.usersFile, c.tokenFile)
	if err != nil {
		return err
	}

	ports := map[string]int{}
	var servers []*http.Server
	start := func(m mode, addr string, tlsConf *tls.Config) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s %s: %w", m, addr, err)
		}
		if tlsConf != nil {
			ln = tls.NewListener(ln, tlsConf)
		}
		ports[m.String()] = ln.Addr().(*net.TCPAddr).Port
		srv := &http.Server{Handler: handler(c, creds, m), ReadHeaderTimeout: 30 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Printf("%s listener stopped: %v", m, err)
			}
		}()
		log.Printf("%s listening on %s", m, ln.Addr())
		return nil
	}

	if c.httpAddr != "" {
		if err := start(modeHTTP, c.httpAddr, nil); err != nil {
			return err
		}
	}
	if c.httpsAddr != "" || c.mtlsAddr != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return fmt.Errorf("server certificate: %w", err)
		}
		if c.httpsAddr != "" {
			conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			if err := start(modeHTTPS, c.httpsAddr, conf); err != nil {
				return err
			}
		}
		if c.mtlsAddr != "" {
			pem, err := os.ReadFile(c.clientCA)
			if err != nil {
				return fmt.Errorf("client CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return errors.New("client CA: no certificate found")
			}
			conf := &tls.Config{
				Certificates: []tls.Certificate{cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    pool,
				MinVersion:   tls.VersionTLS12,
			}
			if err := start(modeMTLS, c.mtlsAddr, conf); err != nil {
				return err
			}
		}
	}
	if len(servers) == 0 {
		return errors.New("no listener configured")
	}
	if c.portsFile != "" {
		if err := writePorts(c.portsFile, ports); err != nil {
			return err
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sig := <-sigs
	log.Printf("received %v, shutting down", sig)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	return nil
}

func writePorts(path string, ports map[string]int) error {
	data, err := json.Marshal(ports)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadCredentials(usersFile, tokenFile string) (credentials, error) {
	creds := credentials{users: map[string]string{}}
	if usersFile != "" {
		err := eachLine(usersFile, func(line string) {
			if user, pass, ok := strings.Cut(line, ":"); ok && user != "" {
				creds.users[user] = pass
			}
		})
		if err != nil {
			return creds, fmt.Errorf("users file: %w", err)
		}
	}
	if tokenFile != "" {
		err := eachLine(tokenFile, func(line string) { creds.tokens = append(creds.tokens, line) })
		if err != nil {
			return creds, fmt.Errorf("tokens file: %w", err)
		}
	}
	return creds, nil
}

func eachLine(path string, f func(string)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			f(line)
		}
	}
	return sc.Err()
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// authenticate returns the user name, whether credentials were presented and
// whether they are valid.
func (c credentials) authenticate(r *http.Request) (user string, presented, valid bool) {
	header := r.Header.Get("Authorization")
	if header == "" {
		return "", false, false
	}
	if u, p, ok := r.BasicAuth(); ok {
		want, known := c.users[u]
		return u, true, known && equal(want, p)
	}
	scheme, token, ok := strings.Cut(header, " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(token)
		for _, t := range c.tokens {
			if equal(t, token) {
				return "bearer", true, true
			}
		}
	}
	return "", true, false
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func handler(c config, creds credentials, m mode) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		user := serve(c, creds, m, sw, r)
		log.Printf("%s %s %s %q user=%q status=%d", m, r.RemoteAddr, r.Method, r.URL.RequestURI(), user, sw.status)
	})
}

func serve(c config, creds credentials, m mode, w http.ResponseWriter, r *http.Request) string {
	if r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("ok"))
		return ""
	}
	user, presented, valid := creds.authenticate(r)
	switch m {
	case modeHTTP:
		if presented && !valid {
			unauthorized(w)
			return user
		}
		if !presented {
			user = "anonymous"
		}
	case modeHTTPS:
		if !valid {
			unauthorized(w)
			return user
		}
	case modeMTLS:
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "client certificate required", http.StatusForbidden)
			return ""
		}
		user = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if strings.Contains(r.URL.Path, "..") {
		http.Error(w, "bad path", http.StatusBadRequest)
		return user
	}
	h := &cgi.Handler{
		Path: c.backend,
		Dir:  c.root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + c.root,
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=" + user,
			"GIT_PROTOCOL=" + r.Header.Get("Git-Protocol"),
			"GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + c.root,
		},
		InheritEnv: []string{"PATH"},
		Stderr:     os.Stderr,
	}
	h.ServeHTTP(w, r)
	return user
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="rflux-e2e"`)
	http.Error(w, "authentication required", http.StatusUnauthorized)
}
