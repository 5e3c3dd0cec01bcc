// Command rara-executor-go serves rara.v1 ExecutorService with the Go operations.
//
// Flags match `rara executor` where they mean the same; each falls back to the environment
// variable RARA_EXECUTOR_<FLAG> (upper case, "-" as "_"), then to the default. The artifact
// store defaults to $RARA_ARTIFACTS (a directory; s3:// is not supported here).
//
// SIGTERM and SIGINT start a graceful shutdown: health goes NOT_SERVING, new jobs are
// refused, running ones get --grace seconds to finish, the rest are stopped and reported
// as retryable UNAVAILABLE so a worker runs them elsewhere. Exit code 2: refused settings.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"rara.local/executor/go/artifacts"
	"rara.local/executor/go/executor"
	"rara.local/executor/go/ops"
)

type settings struct {
	listen, artifactRoot, plugins, tokenFile, logLevel string
	tlsCert, tlsKey, tlsClientCA                       string
	insecureLoopback, durable                          bool
	maxConcurrency                                     int
	grace, cancelGrace                                 float64
}

func env(name, def string) string {
	if v, ok := os.LookupEnv("RARA_EXECUTOR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); ok {
		return v
	}
	return def
}

func parse(args []string) (*settings, error) {
	fs := flag.NewFlagSet("rara-executor-go", flag.ContinueOnError)
	s := &settings{}
	fs.StringVar(&s.listen, "listen", env("listen", "127.0.0.1:50051"), "host:port to serve on (port 0: any)")
	fs.StringVar(&s.artifactRoot, "artifact-root", env("artifact-root", os.Getenv("RARA_ARTIFACTS")),
		"shared artifact store directory (default: RARA_ARTIFACTS)")
	fs.StringVar(&s.plugins, "plugins", env("plugins", "builtin"),
		"operation sets to serve, comma-separated: builtin, conformance, chaos")
	fs.StringVar(&s.tokenFile, "token-file", env("token-file", ""), "file holding the bearer token clients must send")
	fs.StringVar(&s.tlsCert, "tls-cert", env("tls-cert", ""), "server certificate (PEM)")
	fs.StringVar(&s.tlsKey, "tls-key", env("tls-key", ""), "server private key (PEM)")
	fs.StringVar(&s.tlsClientCA, "tls-client-ca", env("tls-client-ca", ""), "CA (PEM) client certificates must chain to")
	fs.StringVar(&s.logLevel, "log-level", env("log-level", "info"), "debug, info, warning or error")
	var err error
	boolean := func(name string) bool {
		v := env(name, "false")
		b, perr := strconv.ParseBool(v)
		if perr != nil && err == nil {
			err = fmt.Errorf("RARA_EXECUTOR_%s: not a boolean: %q", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), v)
		}
		return b
	}
	number := func(name string, def float64) float64 {
		v := env(name, "")
		if v == "" {
			return def
		}
		f, perr := strconv.ParseFloat(v, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("RARA_EXECUTOR_%s: not a number: %q", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), v)
		}
		return f
	}
	fs.BoolVar(&s.insecureLoopback, "insecure-loopback", boolean("insecure-loopback"),
		"allow no authentication; only with a loopback --listen address")
	fs.BoolVar(&s.durable, "durable", !boolean("no-fsync"), "fsync artifacts (false: scratch stores)")
	fs.IntVar(&s.maxConcurrency, "max-concurrency", int(number("max-concurrency", 16)), "jobs at once")
	fs.Float64Var(&s.grace, "grace", number("grace", 30), "seconds running jobs get to finish on SIGTERM")
	fs.Float64Var(&s.cancelGrace, "cancel-grace", number("cancel-grace", 5),
		"seconds an operation gets to honour a cancel before a hard stop")
	if err != nil {
		return nil, err
	}
	if perr := fs.Parse(args); perr != nil {
		return nil, perr
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch {
	case s.artifactRoot == "":
		return nil, errors.New("--artifact-root (or RARA_ARTIFACTS) is required")
	case strings.Contains(s.artifactRoot, "://"):
		return nil, fmt.Errorf("--artifact-root %q: only a directory is supported by the Go executor", s.artifactRoot)
	case s.maxConcurrency < 1:
		return nil, fmt.Errorf("--max-concurrency must be >= 1, got %d", s.maxConcurrency)
	case s.grace < 0 || s.cancelGrace < 0:
		return nil, errors.New("--grace and --cancel-grace must be >= 0")
	}
	return s, nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func logger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.Replace(strings.ToLower(level), "warning", "warn", 1))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func run(args []string) int {
	s, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	log := logger(s.logLevel)
	auth := executor.AuthConfig{TLSCert: s.tlsCert, TLSKey: s.tlsKey, TLSClientCA: s.tlsClientCA,
		InsecureLoopback: s.insecureLoopback}
	if s.tokenFile != "" {
		if auth.Token, err = executor.ReadToken(s.tokenFile); err != nil {
			fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
			return 2
		}
	}
	if err := auth.Check(s.listen); err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	opts, err := auth.ServerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	registry := executor.NewRegistry()
	if err := ops.Register(registry, strings.FieldsFunc(s.plugins, func(r rune) bool { return r == ',' || r == ' ' })); err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	store, err := artifacts.Open(s.artifactRoot, s.durable)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	service, err := executor.NewService(registry, store, s.maxConcurrency, seconds(s.cancelGrace), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	lis, err := net.Listen("tcp", s.listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rara-executor-go: %v\n", err)
		return 2
	}
	server := executor.NewServer(service, opts...)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- server.GRPC.Serve(lis) }()
	host := s.listen[:strings.LastIndex(s.listen, ":")]
	address := net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(lis.Addr().(*net.TCPAddr).Port))
	caps := make([]string, 0)
	for _, op := range registry.Operations() {
		caps = append(caps, op.Capability())
	}
	log.Info("executor listening", "address", address, "capabilities", caps,
		"max_concurrency", s.maxConcurrency)
	// A plain line too, the same as `rara executor`: scripts wait for it.
	fmt.Printf("rara executor listening on %s\n", address)
	select {
	case sig := <-stop:
		log.Info("executor shutting down", "signal", sig.String(), "grace", s.grace)
		server.Stop(seconds(s.grace))
		log.Info("executor stopped")
		return 0
	case err := <-served:
		log.Error("server failed", "error", err)
		return 1
	}
}

func main() { os.Exit(run(os.Args[1:])) }
