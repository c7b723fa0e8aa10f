// Package cli is jobmesh's command-line client: `jobmesh login`, `jobmesh jobs …`, `jobmesh runs …`
// and `jobmesh executors …` over the services' gRPC APIs, with tables for people and `-o json`
// for scripts. The login token and the service addresses are kept in the user's config file.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// Exit codes: what a script can tell apart.
const (
	ExitOK          = 0 // done
	ExitError       = 1 // anything else went wrong
	ExitUsage       = 2 // bad command line
	ExitAuth        = 3 // not logged in, bad credentials or not allowed
	ExitNotFound    = 4 // no such job, run or group
	ExitInvalid     = 5 // the server refused the input (the message names the field)
	ExitUnavailable = 6 // a service could not be reached
	ExitConflict    = 7 // the job changed since it was read (stale version)
	ExitRunFailed   = 8 // `runs tail`: the run ended other than successfully
)

// Usage is the client's help text.
const Usage = `jobmesh client commands:
  jobmesh login --user NAME [--password-stdin]     log in; the token is kept in the config file
  jobmesh logout                                   end the session and forget the token
  jobmesh jobs list [--group N] [--status running|stopped] [--name S] [--handler S] [--author S] [--limit N]
  jobmesh jobs get ID
  jobmesh jobs create -f FILE                      FILE: a job as JSON (the REST shape); - reads stdin
  jobmesh jobs update ID -f FILE                   replaces the job's fields (version from FILE, else current)
  jobmesh jobs start|stop|delete ID
  jobmesh jobs trigger ID [--params S] [--address HOST:PORT,...]
  jobmesh runs list [--job N] [--group N] [--status running|success|fail|timeout|killed] [--limit N]
  jobmesh runs tail RUN_ID                         follow a run's output until it ends
  jobmesh runs kill RUN_ID
  jobmesh executors list [--app NAME]

Flags of every client command:
  -o table|json      output (default table)
  --scheduler-addr, --logs-addr, --registry-addr, --auth-addr
                     service gRPC addresses (default: the config file's, else jobmesh dev's)
  --token T          token to present (default: JOBMESH_TOKEN, else the config file's)
  --tls-cert F, --tls-key F, --tls-ca F
                     client certificate, key and CA for mutual TLS (JOBMESH_TLS_CERT, ...)
  --data-dir D       without --tls-*: use jobmesh dev's client certificate under D/tls
                     (default: JOBMESH_DATA_DIR, else .data/dev, dev's default)
  --insecure         plaintext, for services started with --insecure (JOBMESH_INSECURE)
Config file: JOBMESH_CONFIG, else $XDG_CONFIG_HOME/jobmesh/config.json (~/.config/jobmesh/config.json).
Exit codes: 0 ok, 1 error, 2 usage, 3 auth, 4 not found, 5 invalid input, 6 unavailable, 7 conflict,
8 tailed run did not succeed.
`

// Config is what the client keeps between invocations.
type Config struct {
	// Token is the login token.
	Token string `json:"token,omitempty"`
	// User is who logged in.
	User string `json:"user,omitempty"`
	// SchedulerAddr, LogsAddr, RegistryAddr and AuthAddr are the services' gRPC addresses.
	SchedulerAddr string `json:"scheduler_addr,omitempty"`
	LogsAddr      string `json:"logs_addr,omitempty"`
	RegistryAddr  string `json:"registry_addr,omitempty"`
	AuthAddr      string `json:"auth_addr,omitempty"`
}

// ConfigPath is where the config file lives.
func ConfigPath() (string, error) {
	if p := os.Getenv("JOBMESH_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory: %w (set JOBMESH_CONFIG)", err)
	}
	return filepath.Join(dir, "jobmesh", "config.json"), nil
}

func loadConfig() (Config, string, error) {
	var c Config
	p, err := ConfigPath()
	if err != nil {
		return c, "", err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return c, p, nil
	}
	if err != nil {
		return c, p, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, p, fmt.Errorf("%s: %w", p, err)
	}
	return c, p, nil
}

func saveConfig(p string, c Config) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil { // it holds a token
		return err
	}
	return os.Rename(tmp, p)
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// client is one invocation's state.
type client struct {
	cfg     Config
	cfgPath string
	output  string
	token   string
	tls     TLSFlags
	stdin   io.Reader
	stdout  io.Writer
	conns   []*grpc.ClientConn
}

// Run runs one client command (args start with the command's name) and returns its exit code;
// errors are written to stderr.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdin, stdout, stderr)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	fmt.Fprintln(stderr, "jobmesh:", describe(err))
	return exitCode(err)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cfg, path, err := loadConfig()
	if err != nil {
		return err
	}
	c := &client{cfg: cfg, cfgPath: path, stdin: stdin, stdout: stdout}
	defer c.close()
	cmd, rest := args[0], args[1:]
	if cmd == "jobs" || cmd == "runs" || cmd == "executors" {
		if len(rest) == 0 {
			return usagef("%s: which subcommand?", cmd)
		}
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("jobmesh "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage) }
	fs.StringVar(&c.output, "o", "table", "output: table or json")
	fs.StringVar(&c.cfg.SchedulerAddr, "scheduler-addr", or(cfg.SchedulerAddr, "127.0.0.1:9010"), "scheduler gRPC address")
	fs.StringVar(&c.cfg.LogsAddr, "logs-addr", or(cfg.LogsAddr, "127.0.0.1:9012"), "logsvc gRPC address")
	fs.StringVar(&c.cfg.RegistryAddr, "registry-addr", or(cfg.RegistryAddr, "127.0.0.1:9011"), "registry gRPC address")
	fs.StringVar(&c.cfg.AuthAddr, "auth-addr", or(cfg.AuthAddr, "127.0.0.1:9013"), "auth gRPC address")
	fs.StringVar(&c.token, "token", or(os.Getenv("JOBMESH_TOKEN"), cfg.Token), "token to present")
	c.tls.Add(fs)
	setup, ok := commands[cmd]
	if !ok {
		return usagef("unknown command %q", strings.Join(args[:min(2, len(args))], " "))
	}
	do := setup(fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if c.output != "table" && c.output != "json" {
		return usagef("-o %q: want table or json", c.output)
	}
	return do(ctx, c, pos)
}

// parseInterleaved lets flags follow positional arguments (`jobs get 7 -o json`).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (c *client) close() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

// dial connects to one service over mutual TLS (TLSFlags), presenting the token when there is one.
func (c *client) dial(addr string) (*grpc.ClientConn, error) {
	id, err := c.tls.Identity()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{id.DialOption()}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.token)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, cc)
	return cc, nil
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func (c *client) jobs() (schedulerv1.JobServiceClient, error) {
	cc, err := c.dial(c.cfg.SchedulerAddr)
	if err != nil {
		return nil, err
	}
	return schedulerv1.NewJobServiceClient(cc), nil
}

func (c *client) logs() (logsv1.LogServiceClient, error) {
	cc, err := c.dial(c.cfg.LogsAddr)
	if err != nil {
		return nil, err
	}
	return logsv1.NewLogServiceClient(cc), nil
}

func (c *client) auth() (authv1.AuthServiceClient, error) {
	cc, err := c.dial(c.cfg.AuthAddr)
	if err != nil {
		return nil, err
	}
	return authv1.NewAuthServiceClient(cc), nil
}

func (c *client) registry() (registryv1.RegistryServiceClient, error) {
	cc, err := c.dial(c.cfg.RegistryAddr)
	if err != nil {
		return nil, err
	}
	return registryv1.NewRegistryServiceClient(cc), nil
}

// printJSON writes m as protojson (the REST shape), one document.
func (c *client) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

// table writes rows under a header, columns aligned.
func (c *client) table(header []string, rows [][]string) error {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// command is one client command: it registers its flags and returns what it does with its
// positional arguments once they are parsed.
type command func(fs *flag.FlagSet) func(ctx context.Context, c *client, args []string) error

// oneID reads the single numeric id argument.
func oneID(args []string, what string) (int64, error) {
	if len(args) != 1 {
		return 0, usagef("want one %s id, got %d arguments", what, len(args))
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s id %q: want a positive number", what, args[0])
	}
	return id, nil
}

func oneArg(args []string, what string) (string, error) {
	if len(args) != 1 || args[0] == "" {
		return "", usagef("want one %s, got %d arguments", what, len(args))
	}
	return args[0], nil
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05.000")
}

func trimEnum(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	var re runEnded
	if errors.As(err, &re) {
		return ExitRunFailed
	}
	st, ok := status.FromError(err)
	if !ok {
		return ExitError
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return ExitAuth
	case codes.NotFound:
		return ExitNotFound
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return ExitInvalid
	case codes.Unavailable, codes.DeadlineExceeded:
		return ExitUnavailable
	case codes.Aborted, codes.AlreadyExists:
		return ExitConflict
	}
	return ExitError
}

// describe turns gRPC errors into one readable line.
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := st.Message()
	if st.Code() == codes.Unauthenticated {
		msg += " (log in with `jobmesh login`, or pass --token)"
	}
	return words(st.Code().String()) + ": " + msg
}

// words turns a code name like "NotFound" into "not found".
func words(camel string) string {
	var b strings.Builder
	for i, r := range camel {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// runEnded: a tailed run ended without success.
type runEnded struct{ status string }

func (e runEnded) Error() string { return "run ended " + e.status }

// deadline bounds a unary call.
func deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}
