// Package cli is jobmesh's command-line client: `jobmesh login`, `jobmesh jobs …`, `jobmesh runs …`
// and `jobmesh executors …` over the gateway's REST API (one --endpoint, the Bearer token of a
// login), with tables for people and `-o json` for scripts. The token, and the endpoint and CA it
// belongs to, are kept in the user's config file.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/restconn"
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

// DefaultEndpoint is the gateway of `jobmesh dev` (its --http-addr), the client's endpoint when
// neither a flag, JOBMESH_ENDPOINT nor the config file names one.
const DefaultEndpoint = "http://127.0.0.1:8080"

// Usage is the client's help text.
const Usage = `jobmesh client commands:
  jobmesh login --user NAME [--password-stdin]     log in (prompts for the password on a terminal);
                                                   the token, endpoint and CA are kept in the config file
  jobmesh logout                                   end the session and forget the token
  jobmesh jobs list [--group N] [--status running|stopped] [--name S] [--handler S] [--author S] [--limit N]
  jobmesh jobs get ID
  jobmesh jobs create -f FILE                      FILE: a job as JSON (the REST shape); - reads stdin
  jobmesh jobs update ID -f FILE                   replaces the job's fields (version from FILE, else current)
  jobmesh jobs start|stop|delete ID
  jobmesh jobs trigger ID [--params S] [--address HOST:PORT,...]
  jobmesh workflows list [--group N] [--limit N]
  jobmesh workflows get ID
  jobmesh workflows create -f FILE                 FILE: a workflow as JSON (the REST shape); - reads stdin
  jobmesh workflows trigger ID [--param KEY=VALUE]...
  jobmesh workflows instances ID [--limit N]       a workflow's instances, newest first
  jobmesh workflows instance|kill|retry INSTANCE_ID
  jobmesh runs list [--job N] [--group N] [--status running|success|fail|timeout|killed|skipped] [--executor ADDR] [--limit N]
  jobmesh runs tail RUN_ID [--from N]              follow a run's output until it ends
  jobmesh runs kill RUN_ID
  jobmesh executors list [--app NAME]
  jobmesh import xxl-job --mysql DSN [--time-zone ZONE] [--access-token TOKEN] [--dry-run]
                                                   copy an XXL-JOB database's executor groups, jobs and
                                                   users into jobmesh (again: changes only what differs)

Flags of every client command (jobmesh <command> -h lists a command's own):
  -o table|json      output (default table)
  --endpoint URL     the gateway's URL (JOBMESH_ENDPOINT, else the config file's, else ` + DefaultEndpoint + `,
                     jobmesh dev's)
  --token TOKEN      token to present (JOBMESH_TOKEN, else the config file's)
  --tls-ca FILE      PEM CA bundle an https endpoint's certificate must chain to (JOBMESH_TLS_CA, else
                     the config file's, else the system's roots)
Login password: a terminal prompt, else --password-stdin (first line of stdin), else JOBMESH_PASSWORD.
Config file: JOBMESH_CONFIG, else $XDG_CONFIG_HOME/jobmesh/config.json (~/.config/jobmesh/config.json).
Exit codes: 0 ok, 1 error, 2 usage, 3 auth, 4 not found, 5 invalid input, 6 unavailable, 7 conflict,
8 tailed run did not succeed.
`

// Config is what the client keeps between invocations: the last login's token and where it
// belongs.
type Config struct {
	// Token is the login token.
	Token string `json:"token,omitempty"`
	// User is who logged in.
	User string `json:"user,omitempty"`
	// Endpoint is the gateway's URL the token belongs to.
	Endpoint string `json:"endpoint,omitempty"`
	// TLSCA is the CA bundle file the endpoint's certificate is checked against; empty means the
	// system's roots.
	TLSCA string `json:"tls_ca,omitempty"`
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
	cfg      Config
	cfgPath  string
	output   string
	endpoint string
	token    string
	tlsCA    string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	conn     *restconn.Conn
}

// Commands lists the client's commands ("login", "jobs list", …) in the order of Usage.
func Commands() []string {
	return []string{"login", "logout", "jobs list", "jobs get", "jobs create", "jobs update", "jobs start", "jobs stop",
		"jobs delete", "jobs trigger", "workflows list", "workflows get", "workflows create", "workflows trigger",
		"workflows instances", "workflows instance", "workflows kill", "workflows retry", "runs list", "runs tail", "runs kill", "executors list", "import xxl-job"}
}

// operands name the positional arguments of the commands that take one, for their usage line.
var operands = map[string]string{"jobs get": "ID", "jobs update": "ID", "jobs start": "ID", "jobs stop": "ID",
	"jobs delete": "ID", "jobs trigger": "ID", "runs tail": "RUN_ID", "runs kill": "RUN_ID",
	"workflows get": "ID", "workflows trigger": "ID", "workflows instances": "ID", "workflows instance": "INSTANCE_ID",
	"workflows kill": "INSTANCE_ID", "workflows retry": "INSTANCE_ID"}

// Groups are the first words of the client's two-word commands.
var Groups = []string{"jobs", "workflows", "runs", "executors", "import"}

// FlagSet returns the flags of a client command as Run declares them (for help, shell
// completion and tests); nil for an unknown command.
func FlagSet(command string) *flag.FlagSet {
	c := &client{}
	fs, _, err := c.flagSet(command, io.Discard)
	if err != nil {
		return nil
	}
	return fs
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
	fmt.Fprintln(stderr, "jobmesh:", describe(err, args))
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
	c := &client{cfg: cfg, cfgPath: path, stdin: stdin, stdout: stdout, stderr: stderr}
	cmd, rest := args[0], args[1:]
	for _, g := range Groups {
		if cmd != g {
			continue
		}
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "--help" || rest[0] == "help") {
			fmt.Fprint(stdout, Usage)
			return flag.ErrHelp
		}
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return usagef("%s: which subcommand? (%s)", cmd, strings.Join(subcommands(cmd), ", "))
		}
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	if _, ok := commands[cmd]; !ok {
		return usagef("unknown command %q", cmd)
	}
	fs, do, err := c.flagSet(cmd, stderr)
	if err != nil {
		return err
	}
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

// subcommands are the second words of a group's commands.
func subcommands(group string) []string {
	var out []string
	for _, c := range Commands() {
		if g, sub, ok := strings.Cut(c, " "); ok && g == group {
			out = append(out, sub)
		}
	}
	return out
}

// flagSet declares the flags of cmd, the common ones first, with defaults from the environment
// and the config file.
func (c *client) flagSet(cmd string, stderr io.Writer) (*flag.FlagSet, func(context.Context, *client, []string) error, error) {
	setup, ok := commands[cmd]
	if !ok {
		return nil, nil, usagef("unknown command %q", cmd)
	}
	fs := flag.NewFlagSet("jobmesh "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobmesh %s [flags] (jobmesh help lists every command)\n\nFlags:\n", strings.TrimSpace(cmd+" "+operands[cmd]))
		fs.PrintDefaults()
	}
	fs.StringVar(&c.output, "o", "table", "`format` of the output: table or json")
	fs.StringVar(&c.endpoint, "endpoint", or(os.Getenv("JOBMESH_ENDPOINT"), c.cfg.Endpoint, DefaultEndpoint), "the gateway's `url` (JOBMESH_ENDPOINT)")
	fs.StringVar(&c.token, "token", or(os.Getenv("JOBMESH_TOKEN"), c.cfg.Token), "`token` to present (JOBMESH_TOKEN; default: the config file's)")
	fs.StringVar(&c.tlsCA, "tls-ca", or(os.Getenv("JOBMESH_TLS_CA"), c.cfg.TLSCA), "PEM CA bundle `file` an https endpoint's certificate must chain to; empty means the system's roots (JOBMESH_TLS_CA)")
	return fs, setup(fs), nil
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

// or returns the first non-empty string.
func or(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// rest returns the connection to the gateway, made on first use.
func (c *client) rest() (*restconn.Conn, error) {
	if c.conn != nil {
		return c.conn, nil
	}
	if _, err := restconn.ParseEndpoint(c.endpoint); err != nil {
		return nil, usageError{"--endpoint: " + err.Error()}
	}
	hc := http.DefaultClient
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", c.tlsCA)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc = &http.Client{Transport: tr}
	}
	conn, err := restconn.New(c.endpoint, hc, c.token)
	if err != nil {
		return nil, usageError{"--endpoint: " + err.Error()}
	}
	c.conn = conn
	return conn, nil
}

func (c *client) jobs() (schedulerv1.JobServiceClient, error) {
	cc, err := c.rest()
	if err != nil {
		return nil, err
	}
	return schedulerv1.NewJobServiceClient(cc), nil
}

func (c *client) logs() (logsv1.LogServiceClient, error) {
	cc, err := c.rest()
	if err != nil {
		return nil, err
	}
	return logsv1.NewLogServiceClient(cc), nil
}

func (c *client) auth() (authv1.AuthServiceClient, error) {
	cc, err := c.rest()
	if err != nil {
		return nil, err
	}
	return authv1.NewAuthServiceClient(cc), nil
}

func (c *client) registry() (registryv1.RegistryServiceClient, error) {
	cc, err := c.rest()
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
	return t.AsTime().Local().Format("2006-01-02 15:04:05.000 MST")
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

// describe turns an error into one readable line: a status error's message, said once ("job 9
// not found", not "not found: job 9: not found"), with a hint where one helps. args are the
// command's.
func describe(err error, args []string) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg, code := st.Message(), st.Code()
	what := words(code.String())
	if code == codes.Unavailable && strings.Contains(msg, "cannot reach") {
		return msg
	}
	// The services say "<thing>: not found" (the domain's sentinel after its subject), and
	// "<what happened>: conflict" of a stale version.
	if subject, ok := strings.CutSuffix(msg, ": conflict"); ok {
		return "conflict: " + subject
	}
	if subject, ok := strings.CutSuffix(msg, ": "+what); ok {
		msg = subject + " " + what
	}
	if !strings.Contains(strings.ToLower(msg), what) {
		msg = what + ": " + msg
	}
	switch code {
	case codes.Unauthenticated:
		if len(args) == 0 || args[0] != "login" { // a failed login needs no advice to log in
			msg += " (log in with `jobmesh login`, or pass --token)"
		}
	}
	return msg
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
