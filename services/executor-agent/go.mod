module github.com/jobmesh/jobmesh/services/executor-agent

go 1.26
