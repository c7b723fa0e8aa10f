// Package xxlimport moves an XXL-JOB admin database into jobmesh through jobmesh's own API, as a
// client: executor groups (matched by app name), jobs with their GLUE versions and child links
// (matched by group and name), and users (matched by user name). It compares what XXL-JOB holds
// with what jobmesh holds and creates or updates only what differs, so a second import changes
// nothing; a dry run reports the same plan and writes nothing. What jobmesh cannot represent is
// reported per object, never dropped silently.
package xxlimport

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/mail"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/hostport"
)

// maxGlueVersions is how many GLUE versions jobmesh keeps per job (as XXL-JOB's web IDE does).
const maxGlueVersions = 30

// API is the part of jobmesh's API the import calls (the generated clients, over REST or gRPC).
type API struct {
	Jobs     schedulerv1.JobServiceClient
	Registry registryv1.RegistryServiceClient
	Auth     authv1.AuthServiceClient
}

// Options tune an import.
type Options struct {
	// DryRun plans without writing anything.
	DryRun bool
	// TimeZone is the IANA zone CRON jobs are evaluated in: the zone of the XXL-JOB admin's JVM,
	// which the database does not record.
	TimeZone string
	// AccessToken is given to created groups, and to existing groups that have none, unless the
	// database holds a group's own token (XXL-JOB 3.5): xxl.job.accessToken of the admin.
	AccessToken string
}

// Action is what the import does (or, in a dry run, would do) with one object.
type Action string

// The actions.
const (
	Create Action = "create"
	Update Action = "update"
	Skip   Action = "skip" // jobmesh already holds it as XXL-JOB does
	Fail   Action = "error"
)

// Item is the plan for, or the outcome of, one XXL-JOB object.
type Item struct {
	// Kind is group, job or user.
	Kind string `json:"kind"`
	// XXLID is the object's id in XXL-JOB.
	XXLID int64 `json:"xxl_id"`
	// Name is the group's app name, the job's name or the user name.
	Name   string `json:"name"`
	Action Action `json:"action"`
	// ID is the object's id in jobmesh, once it has one.
	ID int64 `json:"jobmesh_id,omitempty"`
	// Changes names the fields an update changes.
	Changes []string `json:"changes,omitempty"`
	// Notes say what was not imported as XXL-JOB has it, and why.
	Notes []string `json:"notes,omitempty"`
	// Error is why the object was not (completely) imported: the API's answer where it refused.
	Error string `json:"error,omitempty"`
}

func (it *Item) note(format string, args ...any) {
	it.Notes = append(it.Notes, fmt.Sprintf(format, args...))
}

// fail records err as the item's error; the action becomes Fail when nothing was written yet.
func (it *Item) fail(err error) {
	it.Error = describe(err)
	if it.ID <= 0 {
		it.Action = Fail
	}
}

// Report is the plan (dry run) or the outcome of an import, groups first, then jobs, then users.
type Report struct {
	DryRun bool    `json:"dry_run"`
	Items  []*Item `json:"items"`
}

// Failed counts the objects with an error.
func (r *Report) Failed() int {
	n := 0
	for _, it := range r.Items {
		if it.Error != "" {
			n++
		}
	}
	return n
}

// Count counts the objects of kind whose action is a.
func (r *Report) Count(kind string, a Action) int {
	n := 0
	for _, it := range r.Items {
		if it.Kind == kind && it.Action == a {
			n++
		}
	}
	return n
}

// Run imports src into jobmesh (or plans it, with Options.DryRun). Objects jobmesh refuses are
// reported in the Report and the rest goes on; the error is for what stops the whole import
// (jobmesh unreachable, the caller not an admin).
func Run(ctx context.Context, api API, src *Source, opt Options) (*Report, error) {
	im := &importer{api: api, opt: opt, src: src, rep: &Report{DryRun: opt.DryRun},
		groupIDs: map[int64]int64{}, jobIDs: map[int64]int64{}}
	if err := im.groups(ctx); err != nil {
		return nil, err
	}
	if err := im.jobs(ctx); err != nil {
		return nil, err
	}
	if err := im.users(ctx); err != nil {
		return nil, err
	}
	return im.rep, nil
}

type importer struct {
	api API
	opt Options
	src *Source
	rep *Report
	// groupIDs and jobIDs map XXL-JOB ids to jobmesh ids; a dry run maps what it would create
	// to -(XXL-JOB id). Objects not imported are absent.
	groupIDs, jobIDs map[int64]int64
}

func (im *importer) add(kind string, id int64, name string) *Item {
	it := &Item{Kind: kind, XXLID: id, Name: name}
	im.rep.Items = append(im.rep.Items, it)
	return it
}

// ---- groups

func (im *importer) groups(ctx context.Context) error {
	resp, err := im.api.Registry.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{WithoutExecutors: true})
	if err != nil {
		return fmt.Errorf("list jobmesh's executor groups: %w", err)
	}
	byApp := map[string]*registryv1.ExecutorGroup{}
	for _, g := range resp.GetGroups() {
		byApp[g.GetAppName()] = g
	}
	firstOfApp := map[string]int64{}
	for _, g := range im.src.Groups {
		it := im.add("group", g.ID, g.AppName)
		if first, dup := firstOfApp[g.AppName]; dup {
			// XXL-JOB 2.x lets two groups share an app name; their executors are the same.
			it.Action = Skip
			it.note("same app name as XXL-JOB group %d: it is that group in jobmesh, and its jobs join it", first)
			if id, ok := im.groupIDs[first]; ok {
				im.groupIDs[g.ID], it.ID = id, id
			} else {
				it.fail(fmt.Errorf("XXL-JOB group %d, whose app name it shares, was not imported", first))
			}
			continue
		}
		firstOfApp[g.AppName] = g.ID
		want := wantGroup(g, it)
		if want.AccessToken == "" {
			want.AccessToken = im.opt.AccessToken
		}
		if cur := byApp[g.AppName]; cur != nil {
			it.ID, im.groupIDs[g.ID] = cur.GetId(), cur.GetId()
			it.Changes = diffGroup(cur, want)
			if len(it.Changes) == 0 {
				it.Action = Skip
				continue
			}
			it.Action = Update
			if im.opt.DryRun {
				continue
			}
			want.Id = cur.GetId()
			if _, err := im.api.Registry.UpdateExecutorGroup(ctx, &registryv1.UpdateExecutorGroupRequest{
				Group: want, UpdateMask: &fieldmaskpb.FieldMask{Paths: it.Changes}}); err != nil {
				if fatal(err) {
					return err
				}
				it.fail(err)
			}
			continue
		}
		it.Action = Create
		if im.opt.DryRun {
			im.groupIDs[g.ID] = -g.ID
			continue
		}
		created, err := im.api.Registry.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: want})
		if err != nil {
			if fatal(err) {
				return err
			}
			it.fail(err)
			continue
		}
		it.ID, im.groupIDs[g.ID] = created.GetGroup().GetId(), created.GetGroup().GetId()
	}
	return nil
}

// wantGroup is the jobmesh group of an XXL-JOB group; what does not carry over is noted on it.
func wantGroup(g Group, it *Item) *registryv1.ExecutorGroup {
	want := &registryv1.ExecutorGroup{AppName: g.AppName, Title: strings.TrimSpace(g.Title), AccessToken: g.AccessToken}
	if want.Title == "" {
		want.Title = g.AppName
		it.note("no title in XXL-JOB: the app name is the title")
	}
	switch g.AddressType {
	case 1:
		want.AddressType = registryv1.AddressType_ADDRESS_TYPE_MANUAL
		for _, a := range strings.Split(g.AddressList, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			hp, why := executorURL(a)
			if why != "" {
				it.note("address %q: %s", a, why)
			}
			if hp != "" && !slices.Contains(want.ManualAddresses, hp) {
				want.ManualAddresses = append(want.ManualAddresses, hp)
			}
		}
	default:
		if g.AddressType != 0 {
			it.note("address_type %d is neither 0 (automatic) nor 1 (manual): imported as automatic", g.AddressType)
		}
		want.AddressType = registryv1.AddressType_ADDRESS_TYPE_AUTO
		if strings.TrimSpace(g.AddressList) != "" {
			it.note("the addresses XXL-JOB last saw registered are not imported: executors register with jobmesh themselves")
		}
	}
	return want
}

// executorURL turns an XXL-JOB executor address as XXL-JOB stores it ("http://10.0.0.5:9999/")
// into the URL jobmesh calls the executor at (hostport.XxlURL), with a note of what was assumed
// ("" when nothing), or "" and why it cannot.
func executorURL(a string) (string, string) {
	var note string
	if !strings.Contains(a, "://") {
		a, note = "http://"+a, "no scheme: http:// assumed"
	}
	u, ok := hostport.XxlURL(a)
	if !ok {
		return "", "not an executor URL (http or https, host, optional port and path): left out"
	}
	return u, note
}

// diffGroup names the fields of cur that want changes. A token is only given to a group that
// has none: reads mask tokens, so an existing one cannot be compared.
func diffGroup(cur, want *registryv1.ExecutorGroup) []string {
	var out []string
	if cur.GetTitle() != want.GetTitle() {
		out = append(out, "title")
	}
	if cur.GetAddressType() != want.GetAddressType() {
		out = append(out, "address_type")
	}
	if !slices.Equal(slices.Sorted(slices.Values(cur.GetManualAddresses())), slices.Sorted(slices.Values(want.GetManualAddresses()))) {
		out = append(out, "manual_addresses")
	}
	if cur.GetAccessToken() == "" && want.GetAccessToken() != "" {
		out = append(out, "access_token")
	}
	return out
}

// ---- jobs

// jobKey matches an XXL-JOB job with a jobmesh job: the same group and name.
type jobKey struct {
	group int64
	name  string
}

// jobPlan is one job between the two passes: jobs first, then child links and status, once
// every child has its jobmesh id.
type jobPlan struct {
	it       *Item
	src      Job
	cur      *schedulerv1.Job // in jobmesh now (nil: to create in a dry run)
	status   schedulerv1.JobStatus
	schedule *schedulerv1.Schedule
}

func (im *importer) jobs(ctx context.Context) error {
	existing := map[jobKey][]*schedulerv1.Job{}
	listed := map[int64]bool{}
	for _, gid := range im.groupIDs {
		if gid <= 0 || listed[gid] {
			continue
		}
		listed[gid] = true
		js, err := im.listJobs(ctx, gid)
		if err != nil {
			return err
		}
		for _, j := range js {
			k := jobKey{gid, j.GetName()}
			existing[k] = append(existing[k], j)
		}
	}
	for k := range existing { // oldest first: the order the import created them in
		slices.SortFunc(existing[k], func(a, b *schedulerv1.Job) int { return int(a.GetId() - b.GetId()) })
	}
	xxlGroups := map[int64]bool{}
	for _, g := range im.src.Groups {
		xxlGroups[g.ID] = true
	}
	var plans []*jobPlan
	for _, j := range im.src.Jobs {
		it := im.add("job", j.ID, j.Name)
		gid, ok := im.groupIDs[j.GroupID]
		if !ok {
			if xxlGroups[j.GroupID] {
				it.fail(fmt.Errorf("its executor group (XXL-JOB group %d) was not imported", j.GroupID))
			} else {
				it.fail(fmt.Errorf("job_group %d: no such XXL-JOB group", j.GroupID))
			}
			continue
		}
		want, versions, err := im.wantJob(j, gid, it)
		if err != nil {
			it.fail(err)
			continue
		}
		p := &jobPlan{it: it, src: j, status: want.Status, schedule: want.Schedule}
		k := jobKey{gid, want.GetName()}
		if len(existing[k]) > 0 {
			p.cur, existing[k] = existing[k][0], existing[k][1:]
			it.ID, im.jobIDs[j.ID] = p.cur.GetId(), p.cur.GetId()
			it.Action = Skip
			if err := im.updateJob(ctx, p, want, versions); err != nil {
				return err
			}
		} else {
			it.Action = Create
			if err := im.createJob(ctx, p, want, versions); err != nil {
				return err
			}
		}
		if p.it.Action != Fail {
			plans = append(plans, p)
		}
	}
	for _, p := range plans {
		if err := im.linkAndStart(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (im *importer) listJobs(ctx context.Context, group int64) ([]*schedulerv1.Job, error) {
	var out []*schedulerv1.Job
	token := ""
	for {
		resp, err := im.api.Jobs.ListJobs(ctx, &schedulerv1.ListJobsRequest{GroupId: group, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list the jobs of jobmesh group %d: %w", group, err)
		}
		out = append(out, resp.GetJobs()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// glueVer is one GLUE version as jobmesh keeps it.
type glueVer struct {
	typ            schedulerv1.GlueType
	source, remark string
}

func (v glueVer) same(o glueVer) bool { return v.typ == o.typ && v.source == o.source }

// wantJob is the jobmesh job of an XXL-JOB job (without child links, which need every job's id)
// and the GLUE versions to keep, oldest first; what does not carry over is noted on it. An error
// names the XXL-JOB column holding a value jobmesh has no meaning for.
func (im *importer) wantJob(j Job, group int64, it *Item) (*schedulerv1.Job, []glueVer, error) {
	want := &schedulerv1.Job{
		GroupId: group, Name: j.Name, Author: j.Author, Handler: j.Handler, Params: j.Param,
		TimeoutSeconds: int32(j.Timeout), RetryCount: int32(j.RetryCount), RetryBackoff: schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE,
		GlueSource: j.GlueSource, GlueRemark: j.GlueRemark, Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
	}
	if int64(want.TimeoutSeconds) != j.Timeout || int64(want.RetryCount) != j.RetryCount {
		return nil, nil, fmt.Errorf("executor_timeout %d or executor_fail_retry_count %d: out of range", j.Timeout, j.RetryCount)
	}
	if j.TriggerStatus == 1 {
		want.Status = schedulerv1.JobStatus_JOB_STATUS_RUNNING
	}
	conf := strings.TrimSpace(j.ScheduleConf)
	switch j.ScheduleType {
	case "CRON":
		want.Schedule = &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON, Expression: conf, TimeZone: im.opt.TimeZone}
	case "FIX_RATE":
		want.Schedule = &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: conf}
	case "NONE", "":
		want.Schedule = &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}
		if conf != "" {
			it.note("schedule_conf %q of a NONE schedule has no meaning: not imported", conf)
		}
	default:
		return nil, nil, fmt.Errorf("schedule_type %q: XXL-JOB schedules NONE, CRON or FIX_RATE", j.ScheduleType)
	}
	var ok bool
	if want.MisfireStrategy, ok = enumOf[schedulerv1.MisfireStrategy](schedulerv1.MisfireStrategy_value, "MISFIRE_STRATEGY_", j.Misfire, "DO_NOTHING"); !ok {
		return nil, nil, fmt.Errorf("misfire_strategy %q: want DO_NOTHING or FIRE_ONCE_NOW", j.Misfire)
	}
	if want.RouteStrategy, ok = enumOf[schedulerv1.RouteStrategy](schedulerv1.RouteStrategy_value, "ROUTE_STRATEGY_", j.Route, "FIRST"); !ok {
		return nil, nil, fmt.Errorf("executor_route_strategy %q: not one of XXL-JOB's routing strategies", j.Route)
	}
	if want.BlockStrategy, ok = enumOf[schedulerv1.BlockStrategy](schedulerv1.BlockStrategy_value, "BLOCK_STRATEGY_", j.Block, "SERIAL_EXECUTION"); !ok {
		return nil, nil, fmt.Errorf("executor_block_strategy %q: want SERIAL_EXECUTION, DISCARD_LATER or COVER_EARLY", j.Block)
	}
	if want.GlueType, ok = glueType(j.GlueType); !ok {
		return nil, nil, fmt.Errorf("glue_type %q: not one of XXL-JOB's GLUE types", j.GlueType)
	}
	for _, e := range strings.Split(j.AlarmEmail, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
			it.note("alarm email %q is not an address: left out", e)
			continue
		}
		want.AlarmEmails = append(want.AlarmEmails, e)
	}
	return want, im.glueVersions(j, want, it), nil
}

// enumOf maps an XXL-JOB enum name to jobmesh's value of the same name (def when empty).
func enumOf[E ~int32](values map[string]int32, prefix, name, def string) (E, bool) {
	if name == "" {
		name = def
	}
	v, ok := values[prefix+name]
	return E(v), ok && v != 0
}

func glueType(name string) (schedulerv1.GlueType, bool) {
	if name == "BEAN" {
		return schedulerv1.GlueType_GLUE_TYPE_BEAN, true
	}
	return enumOf[schedulerv1.GlueType](schedulerv1.GlueType_value, "GLUE_TYPE_", name, "BEAN")
}

// glueVersions is a script job's GLUE history as jobmesh will keep it: XXL-JOB's saved versions
// in order, then the current source when it differs from the last saved one, without repeats
// (jobmesh saves a version only when the source changes), the newest maxGlueVersions.
func (im *importer) glueVersions(j Job, want *schedulerv1.Job, it *Item) []glueVer {
	hist := im.src.Glue[j.ID]
	if want.GlueType == schedulerv1.GlueType_GLUE_TYPE_BEAN {
		if len(hist) > 0 {
			it.note("%d GLUE versions of a job that is BEAN now: not imported (jobmesh keeps versions of script jobs)", len(hist))
		}
		return nil
	}
	var out []glueVer
	skipped := 0
	for _, h := range hist {
		t, ok := glueType(h.GlueType)
		if !ok || t == schedulerv1.GlueType_GLUE_TYPE_BEAN {
			skipped++
			continue
		}
		v := glueVer{t, h.GlueSource, h.GlueRemark}
		if len(out) > 0 && out[len(out)-1].same(v) {
			continue
		}
		out = append(out, v)
	}
	if skipped > 0 {
		it.note("%d GLUE versions of no script type: not imported", skipped)
	}
	cur := glueVer{want.GlueType, want.GlueSource, want.GlueRemark}
	if len(out) == 0 || !out[len(out)-1].same(cur) {
		out = append(out, cur)
	}
	if len(out) > maxGlueVersions {
		it.note("%d GLUE versions: the oldest %d are not imported (jobmesh keeps %d)", len(out), len(out)-maxGlueVersions, maxGlueVersions)
		out = out[len(out)-maxGlueVersions:]
	}
	return out
}

// createJob creates a job stopped and without children, with its oldest GLUE version, then
// saves the later versions in order; linkAndStart adds the rest.
func (im *importer) createJob(ctx context.Context, p *jobPlan, want *schedulerv1.Job, versions []glueVer) error {
	if im.opt.DryRun {
		if err := im.checkSchedule(ctx, p); err != nil {
			return err
		}
		if p.it.Action != Fail {
			im.jobIDs[p.src.ID] = -p.src.ID
		}
		return nil
	}
	first := proto.Clone(want).(*schedulerv1.Job)
	first.Status = schedulerv1.JobStatus_JOB_STATUS_STOPPED
	if len(versions) > 0 {
		first.GlueType, first.GlueSource, first.GlueRemark = versions[0].typ, versions[0].source, versions[0].remark
	}
	resp, err := im.api.Jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: first})
	if err != nil {
		if fatal(err) {
			return err
		}
		p.it.fail(err)
		return nil
	}
	p.cur = resp.GetJob()
	p.it.ID, im.jobIDs[p.src.ID] = p.cur.GetId(), p.cur.GetId()
	return im.writeJob(ctx, p, want, versionsAfter(versions, 1))
}

// versionsAfter returns versions[n:], or none.
func versionsAfter(v []glueVer, n int) []glueVer {
	if len(v) <= n {
		return nil
	}
	return v[n:]
}

// updateJob brings an existing job to want: the GLUE versions jobmesh lacks, then the fields
// that differ.
func (im *importer) updateJob(ctx context.Context, p *jobPlan, want *schedulerv1.Job, versions []glueVer) error {
	var appendV []glueVer
	if len(versions) > 0 {
		resp, err := im.api.Jobs.ListGlueVersions(ctx, &schedulerv1.ListGlueVersionsRequest{JobId: p.cur.GetId()})
		if err != nil {
			if fatal(err) {
				return err
			}
			p.it.fail(err)
			return nil
		}
		var have []glueVer
		for _, v := range slices.Backward(resp.GetVersions()) { // oldest first
			have = append(have, glueVer{v.GetGlueType(), v.GetGlueSource(), v.GetGlueRemark()})
		}
		m := overlap(have, versions)
		if m == 0 && len(have) > 0 {
			p.it.note("jobmesh's GLUE history of the job is not XXL-JOB's: XXL-JOB's versions are saved after it")
		}
		appendV = versions[m:]
	}
	if len(appendV) > 0 {
		p.it.Changes = append(p.it.Changes, fmt.Sprintf("glue versions +%d", len(appendV)))
	}
	sim := proto.Clone(p.cur).(*schedulerv1.Job)
	for _, v := range appendV {
		sim.GlueType, sim.GlueSource, sim.GlueRemark = v.typ, v.source, v.remark
	}
	fields := diffJob(sim, want)
	p.it.Changes = append(p.it.Changes, fields...)
	if len(p.it.Changes) > 0 {
		p.it.Action = Update
	}
	if im.opt.DryRun {
		if slices.Contains(fields, "schedule") {
			return im.checkSchedule(ctx, p)
		}
		return nil
	}
	return im.writeJob(ctx, p, want, appendV)
}

// overlap is the largest m such that have ends with want[:m]: the versions jobmesh already has.
func overlap(have, want []glueVer) int {
	for m := min(len(have), len(want)); m > 0; m-- {
		tail := have[len(have)-m:]
		if slices.EqualFunc(tail, want[:m], glueVer.same) {
			return m
		}
	}
	return 0
}

// writeJob saves the GLUE versions in order, then the fields of want that still differ (child
// links and status aside).
func (im *importer) writeJob(ctx context.Context, p *jobPlan, want *schedulerv1.Job, versions []glueVer) error {
	for _, v := range versions {
		resp, err := im.api.Jobs.UpdateJob(ctx, &schedulerv1.UpdateJobRequest{
			Job:        &schedulerv1.Job{Id: p.cur.GetId(), GlueType: v.typ, GlueSource: v.source, GlueRemark: v.remark},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"glue_type", "glue_source", "glue_remark"}},
		})
		if err != nil {
			if fatal(err) {
				return err
			}
			p.it.fail(err)
			return nil
		}
		p.cur = resp.GetJob()
	}
	fields := diffJob(p.cur, want)
	if len(fields) == 0 {
		return nil
	}
	upd := proto.Clone(want).(*schedulerv1.Job)
	upd.Id = p.cur.GetId()
	resp, err := im.api.Jobs.UpdateJob(ctx, &schedulerv1.UpdateJobRequest{Job: upd, UpdateMask: &fieldmaskpb.FieldMask{Paths: fields}})
	if err != nil {
		if fatal(err) {
			return err
		}
		p.it.fail(err)
		return nil
	}
	p.cur = resp.GetJob()
	return nil
}

// diffJob names the fields (update-mask paths) of cur that want changes, child links and
// status aside.
func diffJob(cur, want *schedulerv1.Job) []string {
	var out []string
	add := func(differ bool, field string) {
		if differ {
			out = append(out, field)
		}
	}
	add(cur.GetAuthor() != want.GetAuthor(), "author")
	add(!slices.Equal(cur.GetAlarmEmails(), want.GetAlarmEmails()), "alarm_emails")
	add(!proto.Equal(cur.GetSchedule(), want.GetSchedule()), "schedule")
	add(cur.GetMisfireStrategy() != want.GetMisfireStrategy(), "misfire_strategy")
	add(cur.GetRouteStrategy() != want.GetRouteStrategy(), "route_strategy")
	add(cur.GetHandler() != want.GetHandler(), "handler")
	add(cur.GetParams() != want.GetParams(), "params")
	add(cur.GetBlockStrategy() != want.GetBlockStrategy(), "block_strategy")
	add(cur.GetTimeoutSeconds() != want.GetTimeoutSeconds(), "timeout_seconds")
	add(cur.GetRetryCount() != want.GetRetryCount(), "retry_count")
	add(cur.GetRetryBackoff() != want.GetRetryBackoff(), "retry_backoff")
	add(cur.GetRetryIntervalMs() != want.GetRetryIntervalMs(), "retry_interval_ms")
	add(cur.GetGlueType() != want.GetGlueType(), "glue_type")
	add(cur.GetGlueSource() != want.GetGlueSource(), "glue_source")
	add(cur.GetGlueRemark() != want.GetGlueRemark(), "glue_remark")
	return out
}

// checkSchedule asks jobmesh, without storing anything, whether it accepts the job's schedule
// (a dry run's stand-in for the refusal a write would meet).
func (im *importer) checkSchedule(ctx context.Context, p *jobPlan) error {
	if p.schedule.GetType() == schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE {
		return nil
	}
	resp, err := im.api.Jobs.PreviewSchedule(ctx, &schedulerv1.PreviewScheduleRequest{Schedule: p.schedule, Count: 1})
	if err != nil {
		if fatal(err) {
			return err
		}
		p.it.fail(err)
		return nil
	}
	if len(resp.GetFireTimes()) == 0 && p.status == schedulerv1.JobStatus_JOB_STATUS_RUNNING {
		p.it.Error = "the schedule never fires again: jobmesh refuses to run it (it would be imported stopped)"
	}
	return nil
}

// linkAndStart sets a job's child links (XXL-JOB ids mapped to jobmesh's) and its status, now
// that every job has its jobmesh id.
func (im *importer) linkAndStart(ctx context.Context, p *jobPlan) error {
	var kids []int64
	group := im.groupIDs[p.src.GroupID]
	for _, s := range strings.Split(p.src.ChildJobIDs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			p.it.note("child_jobid %q is not a job id: left out", s)
			continue
		}
		child := slices.IndexFunc(im.src.Jobs, func(j Job) bool { return j.ID == x })
		id, ok := im.jobIDs[x]
		switch {
		case child < 0:
			p.it.note("child job %d: no such XXL-JOB job: left out", x)
		case !ok:
			p.it.note("child job %d was not imported: left out", x)
		case im.groupIDs[im.src.Jobs[child].GroupID] != group:
			p.it.note("child job %d is in another executor group, and jobmesh links children within one group: left out", x)
		case !slices.Contains(kids, id):
			kids = append(kids, id)
		}
	}
	var fields []string
	if p.cur == nil || !slices.Equal(p.cur.GetChildJobIds(), kids) {
		fields = append(fields, "child_job_ids")
	}
	if p.cur == nil || p.cur.GetStatus() != p.status {
		fields = append(fields, "status")
	}
	if len(fields) == 0 {
		return nil
	}
	if p.it.Action == Skip {
		p.it.Action = Update
	}
	if p.it.Action == Update {
		p.it.Changes = append(p.it.Changes, fields...)
	}
	if im.opt.DryRun || p.it.Error != "" {
		return nil
	}
	_, err := im.api.Jobs.UpdateJob(ctx, &schedulerv1.UpdateJobRequest{
		Job:        &schedulerv1.Job{Id: p.cur.GetId(), ChildJobIds: kids, Status: p.status},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: fields},
	})
	if err != nil {
		if fatal(err) {
			return err
		}
		p.it.fail(err)
	}
	return nil
}

// ---- users

func (im *importer) users(ctx context.Context) error {
	if len(im.src.Users) == 0 {
		return nil
	}
	resp, err := im.api.Auth.ListUsers(ctx, &authv1.ListUsersRequest{})
	if err != nil {
		return fmt.Errorf("list jobmesh's users: %w", err)
	}
	byName := map[string]*authv1.User{}
	for _, u := range resp.GetUsers() {
		byName[u.GetUsername()] = u
	}
	xxlGroups := map[int64]bool{}
	for _, g := range im.src.Groups {
		xxlGroups[g.ID] = true
	}
	for _, u := range im.src.Users {
		it := im.add("user", u.ID, u.Username)
		want := &authv1.User{Username: u.Username}
		switch u.Role {
		case 1:
			want.Role = authv1.Role_ROLE_ADMIN
		case 0:
			want.Role = authv1.Role_ROLE_OPERATOR
			for _, s := range strings.Split(u.Permission, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				x, err := strconv.ParseInt(s, 10, 64)
				id, ok := im.groupIDs[x]
				switch {
				case err != nil || !xxlGroups[x]:
					it.note("permission %q names no XXL-JOB group: left out", s)
				case !ok:
					it.note("permitted group %d was not imported: left out", x)
				case !slices.Contains(want.GroupIds, id):
					want.GroupIds = append(want.GroupIds, id)
				}
			}
		default:
			it.fail(fmt.Errorf("role %d: want 0 (user) or 1 (admin)", u.Role))
			continue
		}
		if cur := byName[u.Username]; cur != nil {
			it.ID = cur.GetId()
			if cur.GetRole() != want.GetRole() {
				it.Changes = append(it.Changes, "role")
			}
			if want.GetRole() != authv1.Role_ROLE_ADMIN && !slices.Equal(slices.Sorted(slices.Values(cur.GetGroupIds())), slices.Sorted(slices.Values(want.GetGroupIds()))) {
				it.Changes = append(it.Changes, "group_ids")
			}
			it.Action = Skip
			if len(it.Changes) == 0 {
				continue
			}
			it.Action = Update
			if im.opt.DryRun {
				continue
			}
			want.Id = cur.GetId()
			if _, err := im.api.Auth.UpdateUser(ctx, &authv1.UpdateUserRequest{User: want}); err != nil {
				if fatal(err) {
					return err
				}
				it.fail(err)
			}
			continue
		}
		it.Action = Create
		it.note("password not imported (XXL-JOB keeps unsalted hashes): the user cannot log in until an admin sets one on the web console's Users page, or with jobmesh admin reset-password --user %s", u.Username)
		if im.opt.DryRun {
			continue
		}
		// A random password no one is told: the user cannot log in until one is set for them.
		created, err := im.api.Auth.CreateUser(ctx, &authv1.CreateUserRequest{User: want, Password: randomPassword()})
		if err != nil {
			if fatal(err) {
				return err
			}
			it.fail(err)
			continue
		}
		it.ID = created.GetUser().GetId()
	}
	return nil
}

func randomPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics when the system's source does)
	return base64.RawURLEncoding.EncodeToString(b)
}

// fatal says whether an error stops the whole import: jobmesh unreachable, or the caller
// without the right to import.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// describe is an error in one line: a status error's code and message, as the API gave them.
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}

// WriteText writes the report for people: one line per object (what happens to it, its
// XXL-JOB id and name, its jobmesh id, the fields that change or the error), its notes under
// it, and the totals.
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if r.DryRun {
		fmt.Fprintln(bw, "dry run: the plan; nothing was written")
	}
	for _, it := range r.Items {
		fmt.Fprintf(bw, "%-6s  %-5s xxl %d %q", it.Action, it.Kind, it.XXLID, it.Name)
		switch {
		case it.ID > 0:
			fmt.Fprintf(bw, " -> jobmesh %d", it.ID)
		case it.Action == Create && r.DryRun:
			fmt.Fprint(bw, " -> new")
		}
		if len(it.Changes) > 0 {
			fmt.Fprintf(bw, ": %s", strings.Join(it.Changes, ", "))
		}
		fmt.Fprintln(bw)
		if it.Error != "" {
			fmt.Fprintf(bw, "        error: %s\n", it.Error)
		}
		for _, n := range it.Notes {
			fmt.Fprintf(bw, "        note: %s\n", n)
		}
	}
	var parts []string
	for _, kind := range []string{"group", "job", "user"} {
		parts = append(parts, fmt.Sprintf("%ss %d create, %d update, %d skip, %d error", kind,
			r.Count(kind, Create), r.Count(kind, Update), r.Count(kind, Skip), r.Count(kind, Fail)))
	}
	fmt.Fprintf(bw, "%s; %d with errors\n", strings.Join(parts, "; "), r.Failed())
	return bw.Flush()
}
