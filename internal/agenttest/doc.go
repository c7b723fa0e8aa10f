// Package agenttest holds end-to-end tests of the executor agent against the real logsvc on
// Postgres: delivery through a logsvc outage and through a SIGKILL of the agent process. They
// live in the root module because the agent module must not depend on logsvc or pgx.
package agenttest
