// Package uitest holds the browser test of jobmesh's web console: it starts the whole stack in
// process (internal/devstack) and drives the console in headless Chromium with the playwright-core
// scripts in e2e/ (console.test.mjs; apiref.test.mjs for the API reference page;
// workflows.test.mjs for the workflows page), so the console is tested as a person uses it,
// against the real API.
//
// It needs node, the e2e/ dependencies (npm ci) and Chromium (/usr/bin/chromium, or the path in
// JOBMESH_CHROMIUM); scripts/test.sh installs whatever is missing. A missing one fails the test.
// JOBMESH_UI_SCREENSHOTS=<dir> (relative to the repository root) keeps the screenshots the script
// takes of the main pages; docs/screenshots comes from
//
//	JOBMESH_UI_SCREENSHOTS=docs/screenshots go test -run 'TestConsole|TestWorkflows' ./internal/uitest
package uitest
