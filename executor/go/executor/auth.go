package executor

// Who may call the executor: a bearer token, mutual TLS, or — on loopback only — nobody.
// The same rules as the Python executor (rara/executor/auth.py): running an operation is
// remote code execution with the executor's resources, so it refuses to start
// unauthenticated unless told --insecure-loopback on a loopback address, and refuses a
// bearer token in clear text off loopback (anyone on the path could read and replay it).
// The health service is exempt from the token (Kubernetes gRPC probes cannot send metadata).
//
// The token is checked when a call's headers arrive, before its request message is read:
// a caller without it learns nothing else (not even the size limit) and costs no decoding.

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

const exemptPrefix = "/grpc.health.v1.Health/"

// ErrInsecure: the security settings are missing or contradictory; do not start.
var ErrInsecure = errors.New("insecure configuration")

// AuthConfig says how callers prove who they are.
type AuthConfig struct {
	Token            string // empty: no bearer token
	TLSCert, TLSKey  string // PEM files; both or neither
	TLSClientCA      string // set: clients must present a certificate it signed (mTLS)
	InsecureLoopback bool
}

func (c AuthConfig) authenticates() bool { return c.Token != "" || c.TLSClientCA != "" }

// ReadToken reads a token file (surrounding whitespace ignored); refuses an empty one.
func ReadToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%w: token file %s is empty", ErrInsecure, path)
	}
	return token, nil
}

// IsLoopback: "127.x.x.x:P", "[::1]:P" and "localhost:P".
func IsLoopback(listen string) bool {
	host := listen
	if i := strings.LastIndex(listen, ":"); i >= 0 {
		host = listen[:i]
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Check refuses settings unsafe for listen.
func (c AuthConfig) Check(listen string) error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrInsecure)
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", ErrInsecure)
	}
	if c.Token != "" && c.TLSCert == "" && !IsLoopback(listen) {
		return fmt.Errorf("%w: --token-file given with --listen %q and no --tls-cert: the "+
			"bearer token would travel in clear text; serve TLS (--tls-cert/--tls-key) or "+
			"listen on loopback (127.0.0.1, [::1], localhost)", ErrInsecure, listen)
	}
	if c.authenticates() {
		return nil
	}
	if !c.InsecureLoopback {
		return fmt.Errorf("%w: refusing to start without authentication: give --token-file "+
			"and/or --tls-cert/--tls-key/--tls-client-ca (mutual TLS); for local development "+
			"only, bind to loopback and pass --insecure-loopback", ErrInsecure)
	}
	if !IsLoopback(listen) {
		return fmt.Errorf("%w: --insecure-loopback needs a loopback --listen address "+
			"(127.0.0.1, [::1], localhost), got %q: an unauthenticated executor must not be "+
			"reachable from other hosts", ErrInsecure, listen)
	}
	return nil
}

// ServerOptions: TLS credentials and the token check, as configured.
func (c AuthConfig) ServerOptions() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, err
		}
		conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if c.TLSClientCA != "" {
			pem, err := os.ReadFile(c.TLSClientCA)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%w: no certificate in %s", ErrInsecure, c.TLSClientCA)
			}
			conf.ClientCAs = pool
			conf.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(conf)))
	}
	if c.Token != "" {
		// A tap handle, not an interceptor: grpc-go decodes a unary call's request before its
		// interceptors run (so an oversized one got RESOURCE_EXHAUSTED, not UNAUTHENTICATED);
		// the tap sees only the method and the headers, before the stream is even created.
		opts = append(opts, grpc.InTapHandle(tokenChecker("Bearer "+c.Token)))
	}
	return opts, nil
}

func tokenChecker(expected string) tap.ServerInHandle {
	want := []byte(expected)
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if strings.HasPrefix(info.FullMethodName, exemptPrefix) {
			return ctx, nil
		}
		values := info.Header.Get("authorization")
		// ConstantTimeCompare: the time taken must not reveal how much of a guess matched.
		if len(values) == 1 && subtle.ConstantTimeCompare([]byte(values[0]), want) == 1 {
			return ctx, nil
		}
		return nil, status.Error(codes.Unauthenticated, "missing or invalid bearer token")
	}
}
