package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildJobmesh builds ./cmd/jobmesh of the module that holds the working directory into dir and
// returns the binary's path: tests that run the real processes build it once.
func BuildJobmesh(dir string) (string, error) {
	root, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", errors.New("no go.mod above the working directory")
		}
		root = parent
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build jobmesh: %w", err)
	}
	bin := filepath.Join(dir, "jobmesh")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/jobmesh")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/jobmesh: %v\n%s", err, out.String())
	}
	return bin, nil
}
