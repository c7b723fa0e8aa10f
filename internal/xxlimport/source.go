package xxlimport

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// Group is a row of xxl_job_group: an executor group.
type Group struct {
	ID      int64
	AppName string
	// Title is the display name (column title up to 3.4, name from 3.5).
	Title string
	// AddressType is 0 for executors that register themselves, 1 for a typed address list.
	AddressType int
	// AddressList is the comma-separated executor URLs ("http://10.0.0.5:9999/").
	AddressList string
	// AccessToken is the group's token (column access_token, XXL-JOB 3.5 only).
	AccessToken string
}

// Job is a row of xxl_job_info.
type Job struct {
	ID, GroupID int64
	// Name is the job's description (column job_desc up to 3.4, name from 3.5).
	Name, Author, AlarmEmail         string
	ScheduleType, ScheduleConf       string
	Misfire, Route, Handler, Param   string
	Block                            string
	Timeout, RetryCount              int64
	GlueType, GlueSource, GlueRemark string
	ChildJobIDs                      string
	TriggerStatus                    int
}

// GlueVersion is a row of xxl_job_logglue: a saved GLUE source of a job.
type GlueVersion struct {
	ID, JobID                        int64
	GlueType, GlueSource, GlueRemark string
}

// User is a row of xxl_job_user.
type User struct {
	ID       int64
	Username string
	// Role is 0 for a normal user, 1 for an admin.
	Role int
	// Permission is the comma-separated ids of the groups a normal user may act on.
	Permission string
}

// Source is what an XXL-JOB database holds that the import moves, each table in id order.
type Source struct {
	Groups []Group
	Jobs   []Job
	// Glue is the GLUE history of each job id, oldest first.
	Glue  map[int64][]GlueVersion
	Users []User
}

// HasCron reports whether any job has a CRON schedule (whose time zone the import must be told).
func (s *Source) HasCron() bool {
	return slices.ContainsFunc(s.Jobs, func(j Job) bool { return j.ScheduleType == "CRON" })
}

// Read reads the XXL-JOB tables of the database db is connected to, in one read-only
// transaction so that they agree with each other. It understands the schema of XXL-JOB 2.x to
// 3.5 (title/job_desc were renamed name in 3.5, which also added the groups' access_token).
func Read(ctx context.Context, db *sql.DB) (*Source, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("read the XXL-JOB database: %w", err)
	}
	defer tx.Rollback()
	cols := map[string]map[string]bool{}
	for _, t := range []string{"xxl_job_group", "xxl_job_info", "xxl_job_logglue", "xxl_job_user"} {
		c, err := columns(ctx, tx, t)
		if err != nil {
			return nil, err
		}
		if len(c) == 0 {
			return nil, fmt.Errorf("the database has no table %s: is it XXL-JOB's admin database?", t)
		}
		cols[t] = c
	}
	title := pick(cols["xxl_job_group"], "title", "name")
	jobName := pick(cols["xxl_job_info"], "job_desc", "name")
	if title == "" || jobName == "" {
		return nil, fmt.Errorf("xxl_job_group has neither title nor name, or xxl_job_info neither job_desc nor name: not an XXL-JOB schema this import knows")
	}
	token := "''"
	if cols["xxl_job_group"]["access_token"] {
		token = "COALESCE(access_token, '')"
	}
	src := &Source{Glue: map[int64][]GlueVersion{}}

	rows, err := tx.QueryContext(ctx, `SELECT id, app_name, COALESCE(`+title+`, ''), address_type, COALESCE(address_list, ''), `+token+`
		FROM xxl_job_group ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_group: %w", err)
	}
	if err := scanAll(rows, "xxl_job_group", func() error {
		var g Group
		if err := rows.Scan(&g.ID, &g.AppName, &g.Title, &g.AddressType, &g.AddressList, &g.AccessToken); err != nil {
			return err
		}
		src.Groups = append(src.Groups, g)
		return nil
	}); err != nil {
		return nil, err
	}

	rows, err = tx.QueryContext(ctx, `SELECT id, job_group, COALESCE(`+jobName+`, ''), COALESCE(author, ''), COALESCE(alarm_email, ''),
		COALESCE(schedule_type, ''), COALESCE(schedule_conf, ''), COALESCE(misfire_strategy, ''), COALESCE(executor_route_strategy, ''),
		COALESCE(executor_handler, ''), COALESCE(executor_param, ''), COALESCE(executor_block_strategy, ''),
		COALESCE(executor_timeout, 0), COALESCE(executor_fail_retry_count, 0), COALESCE(glue_type, ''), COALESCE(glue_source, ''),
		COALESCE(glue_remark, ''), COALESCE(child_jobid, ''), COALESCE(trigger_status, 0)
		FROM xxl_job_info ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_info: %w", err)
	}
	if err := scanAll(rows, "xxl_job_info", func() error {
		var j Job
		if err := rows.Scan(&j.ID, &j.GroupID, &j.Name, &j.Author, &j.AlarmEmail, &j.ScheduleType, &j.ScheduleConf, &j.Misfire,
			&j.Route, &j.Handler, &j.Param, &j.Block, &j.Timeout, &j.RetryCount, &j.GlueType, &j.GlueSource, &j.GlueRemark,
			&j.ChildJobIDs, &j.TriggerStatus); err != nil {
			return err
		}
		src.Jobs = append(src.Jobs, j)
		return nil
	}); err != nil {
		return nil, err
	}

	rows, err = tx.QueryContext(ctx, `SELECT id, job_id, COALESCE(glue_type, ''), COALESCE(glue_source, ''), COALESCE(glue_remark, '')
		FROM xxl_job_logglue ORDER BY job_id, id`)
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_logglue: %w", err)
	}
	if err := scanAll(rows, "xxl_job_logglue", func() error {
		var v GlueVersion
		if err := rows.Scan(&v.ID, &v.JobID, &v.GlueType, &v.GlueSource, &v.GlueRemark); err != nil {
			return err
		}
		src.Glue[v.JobID] = append(src.Glue[v.JobID], v)
		return nil
	}); err != nil {
		return nil, err
	}

	rows, err = tx.QueryContext(ctx, `SELECT id, username, role, COALESCE(permission, '') FROM xxl_job_user ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_user: %w", err)
	}
	if err := scanAll(rows, "xxl_job_user", func() error {
		var u User
		if err := rows.Scan(&u.ID, &u.Username, &u.Role, &u.Permission); err != nil {
			return err
		}
		src.Users = append(src.Users, u)
		return nil
	}); err != nil {
		return nil, err
	}
	return src, tx.Commit()
}

// columns lists the columns of table in the connection's current database (none when the
// table does not exist).
func columns(ctx context.Context, tx *sql.Tx, table string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT LOWER(COLUMN_NAME) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	out := map[string]bool{}
	err = scanAll(rows, table+" columns", func() error {
		var c string
		if err := rows.Scan(&c); err != nil {
			return err
		}
		out[c] = true
		return nil
	})
	return out, err
}

// pick returns the first of names that cols has, or "".
func pick(cols map[string]bool, names ...string) string {
	for _, n := range names {
		if cols[n] {
			return n
		}
	}
	return ""
}

// scanAll calls each for every row and closes rows.
func scanAll(rows *sql.Rows, what string, each func() error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}
