package main

import (
	"context"
	"flag"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(config) bool
		wantErr []string
	}{
		{
			name: "flags",
			args: []string{"--app-name", "billing", "--log-dir", "/tmp/x", "--registry-addr", "registry:9011", "--access-token", "t", "--labels", "zone=eu,tier=gold"},
			check: func(c config) bool {
				return c.appName == "billing" && c.logDir == "/tmp/x" && c.registryAddr == "registry:9011" &&
					c.labels["zone"] == "eu" && c.listenAddr == "127.0.0.1:9999" && c.killGrace == 5*time.Second
			},
		},
		{
			name: "environment twins, flags win",
			args: []string{"--app-name", "from-flag"},
			env:  map[string]string{"JOBMESH_APP_NAME": "from-env", "JOBMESH_LOG_DIR": "/var/x", "JOBMESH_KILL_GRACE": "3s", "JOBMESH_ACCESS_TOKEN": "t"},
			check: func(c config) bool {
				return c.appName == "from-flag" && c.logDir == "/var/x" && c.killGrace == 3*time.Second && c.accessToken == "t"
			},
		},
		{
			name:    "missing required fields are named",
			wantErr: []string{"--app-name (JOBMESH_APP_NAME): required", "--log-dir (JOBMESH_LOG_DIR): required"},
		},
		{
			name:    "bad environment values are named",
			args:    []string{"--app-name", "a", "--log-dir", "d"},
			env:     map[string]string{"JOBMESH_KILL_GRACE": "soon", "JOBMESH_LOG_FORMAT": "xml", "JOBMESH_LABELS": "novalue"},
			wantErr: []string{"--kill-grace (JOBMESH_KILL_GRACE)", "--log-format (JOBMESH_LOG_FORMAT)"},
		},
		{
			name: "spool, retention, http allow-list and sidecar",
			args: []string{"--access-token", "t", "--app-name", "a", "--log-dir", "d", "--http-allow-hosts", "api.example.com, *.corp:443", "--handler-addr", "127.0.0.1:7000"},
			env:  map[string]string{"JOBMESH_SPOOL_DIR": "/var/spool/j", "JOBMESH_SPOOL_MAX_BYTES": "1048576", "JOBMESH_LOG_RETENTION_DAYS": "7"},
			check: func(c config) bool {
				return c.spoolDir == "/var/spool/j" && c.spoolMaxBytes == 1<<20 && c.logRetentionDays == 7 &&
					len(c.httpAllowHosts) == 2 && c.httpAllowHosts[1] == "*.corp:443" && c.handlerAddr == "127.0.0.1:7000"
			},
		},
		{
			name:    "bad spool size and retention are named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--spool-max-bytes", "0", "--log-retention-days", "0"},
			wantErr: []string{"--spool-max-bytes (JOBMESH_SPOOL_MAX_BYTES)", "--log-retention-days (JOBMESH_LOG_RETENTION_DAYS)"},
		},
		{
			name:    "negative graces are named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--kill-grace", "-1s", "--stop-grace", "-1s"},
			wantErr: []string{"--kill-grace (JOBMESH_KILL_GRACE)", "--stop-grace (JOBMESH_STOP_GRACE)"},
		},
		{
			name:  "run output cap: default, and from the environment",
			args:  []string{"--access-token", "t", "--app-name", "a", "--log-dir", "d"},
			env:   map[string]string{"JOBMESH_MAX_RUN_OUTPUT_BYTES": "1048576"},
			check: func(c config) bool { return c.maxRunOutputBytes == 1<<20 },
		},
		{
			name:    "a zero run output cap is named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--max-run-output-bytes", "0"},
			wantErr: []string{"--max-run-output-bytes (JOBMESH_MAX_RUN_OUTPUT_BYTES)"},
		},
		{
			name:  "http idle pool: default, and from the environment",
			args:  []string{"--access-token", "t", "--app-name", "a", "--log-dir", "d"},
			env:   map[string]string{"JOBMESH_HTTP_MAX_IDLE_PER_HOST": "8"},
			check: func(c config) bool { return c.httpMaxIdlePerHost == 8 },
		},
		{
			name:    "a zero http idle pool is named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--http-max-idle-per-host", "0"},
			wantErr: []string{"--http-max-idle-per-host (JOBMESH_HTTP_MAX_IDLE_PER_HOST)"},
		},
		{
			name:    "bad labels are named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--labels", "novalue"},
			wantErr: []string{"--labels (JOBMESH_LABELS)"},
		},
		{
			name:  "metrics endpoint",
			args:  []string{"--access-token", "t", "--app-name", "a", "--log-dir", "d"},
			env:   map[string]string{"JOBMESH_METRICS_ADDR": "0.0.0.0:9464"},
			check: func(c config) bool { return c.metricsAddr == "0.0.0.0:9464" },
		},
		{
			name:    "no access token without --insecure, TLS or not",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "ca"},
			wantErr: []string{"--access-token (JOBMESH_ACCESS_TOKEN): required"},
		},
		{
			name:  "no access token with --insecure",
			args:  []string{"--app-name", "a", "--log-dir", "d", "--insecure"},
			check: func(c config) bool { return c.insecure && c.accessToken == "" },
		},
		{
			name:    "bad metrics address is named",
			args:    []string{"--app-name", "a", "--log-dir", "d", "--metrics-addr", "9464"},
			wantErr: []string{"--metrics-addr (JOBMESH_METRICS_ADDR)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConfig(tt.args, env(tt.env))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("got error %q, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			if !tt.check(got) {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--app-name", "agent-test", "--listen-addr", "127.0.0.1:0", "--log-dir", t.TempDir(), "--insecure"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: got %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunWithoutTLSOrInsecureNamesTheFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--app-name", "agent-test", "--listen-addr", "127.0.0.1:0", "--log-dir", t.TempDir(), "--access-token", "s3cret"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("run without TLS flags or --insecure: started, want refused")
	}
	for _, flag := range []string{"--tls-cert", "--tls-key", "--tls-ca", "--insecure"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error %q does not name %s", err, flag)
		}
	}
}

// TestFlagValueNames: every flag that takes a value shows a proper name for it in -h
// ("-log-dir directory", not "-log-dir string"), and no back quote is left in any help text.
func TestFlagValueNames(t *testing.T) {
	t.Parallel()
	var c config
	var labels, hosts string
	fs := newFlagSet(&c, &labels, &hosts)
	valueName := regexp.MustCompile(`^[a-z][a-z0-9:-]*$`)
	generic := map[string]bool{"string": true, "value": true, "int": true, "uint": true, "float": true}
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if name != "" {
				t.Errorf("-%s: a switch shows the value name %q", f.Name, name)
			}
		} else if !valueName.MatchString(name) || generic[name] {
			t.Errorf("-%s: value name %q; put the name of what to give in back quotes in its help", f.Name, name)
		}
		if strings.Contains(usage, "`") {
			t.Errorf("-%s: a back quote is left in its help: %q", f.Name, usage)
		}
	})
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		// The version asks for nothing else, and the environment does not turn it on.
		c, err := parseConfig(args, func(string) string { return "" })
		if err != nil || !c.showVersion {
			t.Errorf("parseConfig(%q) = %+v, %v; want showVersion", args, c.showVersion, err)
		}
	}
	c, _ := parseConfig([]string{"--app-name", "a"}, func(k string) string { return map[string]string{"JOBMESH_VERSION": "true"}[k] })
	if c.showVersion {
		t.Error("JOBMESH_VERSION=true turned --version on")
	}
}
