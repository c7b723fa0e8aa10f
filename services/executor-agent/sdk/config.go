package sdk

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"google.golang.org/grpc"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// Config describes one executor: who it is, where it listens, where it registers and where its
// results go. Zero values mean the documented defaults.
type Config struct {
	// AppName is the executor group's app name the executor registers under: 1–64 of
	// [A-Za-z0-9_.-]. Required.
	AppName string
	// InstanceID names this executor within its app (the etcd key's last part): 1–128 of
	// [A-Za-z0-9_.:-]. Default: hostname-pid.
	InstanceID string
	// ListenAddr is the gRPC listen address of ExecutorService. Default "127.0.0.1:9999"; port 0
	// picks a free port (see Addr).
	ListenAddr string
	// AdvertiseAddr is the "host:port" registered for the scheduler to dial. Default: the
	// listener's actual address; an unspecified listen host (0.0.0.0, ::) is replaced by the
	// first non-loopback IPv4 address of the machine.
	AdvertiseAddr string
	// RegistryAddr is the gRPC address of the registry the executor registers with (it joins
	// the live view of its group while registered, and leaves it when it stops or its heartbeats
	// stop). Empty: the executor does not register (it is reachable only as a MANUAL group's
	// address).
	RegistryAddr string
	// LogsvcAddr is the gRPC address of logsvc's IngestService. Empty disables delivery: output
	// stays in the local run log.
	LogsvcAddr string
	// DialOptions replace the default dial options (plaintext, reconnect backoff capped at 2s)
	// of the registry and logsvc connections, e.g. to add TLS. The executor's credential
	// (AccessToken with its AppName) is added to them.
	DialOptions []grpc.DialOption
	// LogDir holds the local run log, the output of every fire in append-only segment files
	// with an index (runs/<yyyy-mm-dd>/<n>.seg and <n>.idx, a new one every 64 MiB and every
	// day), and the GLUE script files of the running workers (glue/). Required.
	LogDir string
	// AccessToken is the access token of the executor's group. Every ExecutorService call must
	// present it ("authorization: Bearer <token>"; the scheduler does), and the executor
	// presents it, with its AppName, to the registry and logsvc: it is how they know the
	// executor belongs to its group (docs/security.md). Required to register or deliver.
	AccessToken string
	// TLS, when set, makes ExecutorService serve mutual TLS with it: only callers with a
	// certificate of the mesh's CA (the scheduler's) get through. The registry and logsvc
	// connections dial with it too, unless DialOptions replace the defaults. See meshtls.Load.
	TLS *meshtls.Identity
	// Insecure lets an executor start without AccessToken, so that anyone who reaches ListenAddr
	// (with a certificate of the mesh's CA, when TLS is set) can run its handlers: tests, a
	// trusted loopback. Without it such an executor refuses to start.
	Insecure bool
	// Version is the version the executor reports and registers.
	Version string
	// Capacity is how many fires the executor runs at once, over all jobs. A fire that comes due
	// while every slot is taken waits for one; a fire sent while none is free, nor would be for
	// it, is refused as busy (RunAck.busy) and not remembered, and the scheduler sends it again
	// when the executor has room, within the job's misfire threshold. Default 100.
	Capacity int
	// Labels are free-form labels registered with the executor.
	Labels map[string]string
	// LogRetentionDays is how many days of the local run log (runs/<yyyy-mm-dd>/) are kept;
	// older day directories are deleted at Start and then hourly. Negative keeps them forever.
	// Default 30.
	LogRetentionDays int
	// HTTPAllowHosts are the hosts the built-in "http" handler may call: "host" (any port),
	// "host:port" or "*.domain". Empty (the default) refuses every request.
	HTTPAllowHosts []string
	// HTTPMaxIdleConnsPerHost is how many idle connections to one host the "http" handler keeps
	// for the next fires (its fires share one transport, with keep-alive and HTTP/2 where the
	// host offers it): above the fires that call a host at once, connections are closed after
	// use and dialled again. Default 64.
	HTTPMaxIdleConnsPerHost int
	// KillGrace is how long a killed or timed-out script gets between SIGTERM and SIGKILL, and
	// how long Stop waits for the handlers it cancelled. Default 5s.
	KillGrace time.Duration
	// IdleTimeout is how long a job's worker may sit idle before it is reclaimed (and the
	// handler's destroy hook runs). Default 90s, as XXL-JOB.
	IdleTimeout time.Duration
	// MaxPending caps results and log lines held for logsvc and not yet acknowledged; beyond it
	// new lines are dropped and logged (the local run log keeps the output), and beyond a tenth
	// more, results too. Default 500000: 25 s of 20,000 fires/s while logsvc is slow or away,
	// about as many results as SpoolMaxBytes' default holds on disk (a quick fire's result
	// spools in ~190 bytes); each held item takes a few hundred bytes of memory.
	MaxPending int
	// MaxRunOutputBytes caps the output one fire keeps (its local run log and what goes to
	// logsvc), counting each line with its newline: past it the rest is dropped, one line says
	// "output truncated after N bytes", and the fire runs on and ends as it would. Default
	// 64 MiB; negative keeps everything.
	MaxRunOutputBytes int64
	// SpoolDir holds the durable spool of results and log lines not yet acknowledged by logsvc;
	// they are delivered after a restart. One executor per directory. Default LogDir/spool.
	SpoolDir string
	// SpoolMaxBytes caps the spool's files: beyond 90% of it new log lines are dropped, beyond
	// it results too, and the executor logs that the spool is full. Default 128 MiB.
	SpoolMaxBytes int64
	// OnResult, when set, is called once for every fire that ends, after its result is queued
	// for logsvc. It runs on the executor's goroutine that queues results, one fire after
	// another: keep it short.
	OnResult func(Result)
	// Logger receives the executor's own logs. Default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxRunOutputBytes is Config.MaxRunOutputBytes' default.
const DefaultMaxRunOutputBytes = 64 << 20

var (
	appNameRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	instanceIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
)

// validTriggerID reports whether id is 1–128 of [A-Za-z0-9_.:-], not starting with a dot: safe
// to use as a file name. (A loop rather than a regexp: every fire's id is checked, and the
// regexp was 1.5 % of an agent's CPU.)
func validTriggerID(id string) bool {
	if len(id) == 0 || len(id) > 128 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// withDefaults returns cfg with every zero value replaced by its default.
func (cfg Config) withDefaults() Config {
	if cfg.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "executor"
		}
		cfg.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:9999"
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 100
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 5 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.HTTPMaxIdleConnsPerHost == 0 {
		cfg.HTTPMaxIdleConnsPerHost = DefaultHTTPMaxIdleConnsPerHost
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 500_000
	}
	if cfg.MaxRunOutputBytes == 0 {
		cfg.MaxRunOutputBytes = DefaultMaxRunOutputBytes
	}
	if cfg.SpoolDir == "" && cfg.LogDir != "" {
		cfg.SpoolDir = filepath.Join(cfg.LogDir, "spool")
	}
	if cfg.LogRetentionDays == 0 {
		cfg.LogRetentionDays = 30
	}
	if cfg.SpoolMaxBytes == 0 {
		cfg.SpoolMaxBytes = 128 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// validate checks a defaulted config; every error names the field.
func (cfg Config) validate() error {
	var errs []error
	if !appNameRE.MatchString(cfg.AppName) {
		errs = append(errs, fmt.Errorf("AppName %q: want 1–64 of [A-Za-z0-9_.-]", cfg.AppName))
	}
	if !instanceIDRE.MatchString(cfg.InstanceID) {
		errs = append(errs, fmt.Errorf("InstanceID %q: want 1–128 of [A-Za-z0-9_.:-]", cfg.InstanceID))
	}
	if _, _, err := net.SplitHostPort(cfg.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("ListenAddr %q: %w", cfg.ListenAddr, err))
	}
	if cfg.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.AdvertiseAddr); err != nil {
			errs = append(errs, fmt.Errorf("AdvertiseAddr %q: %w", cfg.AdvertiseAddr, err))
		}
	}
	if cfg.LogsvcAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.LogsvcAddr); err != nil {
			errs = append(errs, fmt.Errorf("LogsvcAddr %q: %w", cfg.LogsvcAddr, err))
		}
	}
	if cfg.RegistryAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.RegistryAddr); err != nil {
			errs = append(errs, fmt.Errorf("RegistryAddr %q: %w", cfg.RegistryAddr, err))
		}
	}
	if (cfg.RegistryAddr != "" || cfg.LogsvcAddr != "") && cfg.AccessToken == "" {
		errs = append(errs, errors.New("AccessToken: required to register with the registry or deliver to logsvc (the group's access token)"))
	}
	if cfg.LogDir == "" {
		errs = append(errs, errors.New("LogDir: required"))
	}
	if cfg.AccessToken == "" && !cfg.Insecure {
		// TLS alone is no answer: every executor host holds a certificate of the mesh's CA.
		errs = append(errs, errors.New("AccessToken: required (the executor group's), or anyone who reaches the executor, any other executor host included, runs code on it; set Insecure to allow that"))
	}
	if cfg.Capacity < 0 {
		errs = append(errs, fmt.Errorf("Capacity %d: must not be negative", cfg.Capacity))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"KillGrace", cfg.KillGrace}, {"IdleTimeout", cfg.IdleTimeout}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", f.name, f.d))
		}
	}
	if cfg.SpoolMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("SpoolMaxBytes %d: must not be negative", cfg.SpoolMaxBytes))
	}
	if cfg.HTTPMaxIdleConnsPerHost < 0 {
		errs = append(errs, fmt.Errorf("HTTPMaxIdleConnsPerHost %d: must not be negative", cfg.HTTPMaxIdleConnsPerHost))
	}
	if cfg.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("MaxPending %d: must not be negative", cfg.MaxPending))
	}
	return errors.Join(errs...)
}
