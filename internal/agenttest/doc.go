// Package agenttest holds end-to-end tests of the executor agent against the real logsvc on
// Postgres: delivery through a logsvc outage and through a SIGKILL of the agent process, and the
// graceful shutdown of an agent process (deregistered from etcd at once, then a bounded wait for
// running handlers). They live in the root module because the agent module must not depend on
// logsvc, pgx or the etcd server.
package agenttest
