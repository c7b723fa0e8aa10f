package auth

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

// AuditSink stores audit events. The guard writes one for every change a person makes.
type AuditSink interface {
	RecordAudit(ctx context.Context, e *authv1.AuditEvent) error
}

// RecordAudit stores one event; its id is assigned and its time defaults to now.
func (s *Service) RecordAudit(ctx context.Context, e *authv1.AuditEvent) error {
	t := s.now()
	if e.GetTime().IsValid() {
		t = e.GetTime().AsTime()
	}
	if _, err := s.store.ExecContext(ctx, s.store.Q(`INSERT INTO audit_events (time_ms, username, action, resource, detail) VALUES ($1, $2, $3, $4, $5)`),
		t.UnixMilli(), e.GetUsername(), e.GetAction(), e.GetResource(), e.GetDetail()); err != nil {
		return fmt.Errorf("auth: record audit event: %w", err)
	}
	return nil
}

// ListAuditEvents implements AuthService (admin only): newest first, filtered by user, action,
// resource and time, paged by id or by a number of events to skip, with how many match.
func (s *Service) ListAuditEvents(ctx context.Context, req *authv1.ListAuditEventsRequest) (*authv1.ListAuditEventsResponse, error) {
	if _, err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	var bad apierr.Fields
	size := req.GetPageSize()
	switch {
	case size == 0:
		size = 50
	case size < 1 || size > 1000:
		bad.Add("page_size", "want 1-1000, got %d", size)
	}
	bad.Filter("username", req.GetUsername())
	bad.Filter("action", req.GetAction())
	bad.Filter("resource", req.GetResource())
	bad.Skip("skip", req.GetSkip())
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if t := req.GetStartTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			bad.Add("start_time", "%v", err)
		}
		from = t.AsTime().UnixMilli()
	}
	if t := req.GetEndTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			bad.Add("end_time", "%v", err)
		} else if to = t.AsTime().UnixMilli(); to <= from {
			bad.Add("end_time", "must be after start_time")
		}
	}
	before := int64(math.MaxInt64)
	if pt := req.GetPageToken(); pt != "" {
		v, err := strconv.ParseInt(pt, 10, 64)
		if err != nil || v <= 0 {
			bad.Add("page_token", "not a token this API issued")
		}
		before = v
	}
	if err := bad.Err(); err != nil {
		return nil, err
	}
	// Text filters match what is typed: db.Contains escapes LIKE's wildcards.
	const where = `($1 = '' OR lower(username) LIKE lower($1) ESCAPE '\')
		AND ($2 = '' OR action = $2)
		AND ($3 = '' OR lower(resource) LIKE lower($3) ESCAPE '\')
		AND time_ms >= $4 AND time_ms < $5`
	args := []any{db.Contains(req.GetUsername()), req.GetAction(), db.Contains(req.GetResource()), from, to}
	resp := &authv1.ListAuditEventsResponse{}
	if err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT COUNT(*) FROM audit_events WHERE `+where), args...).Scan(&resp.TotalSize); err != nil {
		return nil, fmt.Errorf("auth: count audit events: %w", err)
	}
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT id, time_ms, username, action, resource, detail FROM audit_events
		WHERE `+where+` AND id < $6 ORDER BY id DESC LIMIT $7 OFFSET $8`), append(args, before, size+1, req.GetSkip())...)
	if err != nil {
		return nil, fmt.Errorf("auth: list audit events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e  authv1.AuditEvent
			ms int64
		)
		if err := rows.Scan(&e.Id, &ms, &e.Username, &e.Action, &e.Resource, &e.Detail); err != nil {
			return nil, fmt.Errorf("auth: list audit events: %w", err)
		}
		e.Time = timestamppb.New(time.UnixMilli(ms))
		resp.Events = append(resp.Events, &e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: list audit events: %w", err)
	}
	if len(resp.Events) > int(size) {
		resp.Events = resp.Events[:size]
		resp.NextPageToken = strconv.FormatInt(resp.Events[size-1].Id, 10)
	}
	return resp, nil
}

// RecordAuditEvent implements AuthService (internal token only).
func (s *Service) RecordAuditEvent(ctx context.Context, req *authv1.RecordAuditEventRequest) (*authv1.RecordAuditEventResponse, error) {
	if c, ok := CallerFrom(ctx); !ok || c.Kind != KindInternal {
		return nil, apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "internal callers only")
	}
	e := req.GetEvent()
	if e.GetAction() == "" {
		return nil, apierr.Field("event.action", "required")
	}
	if err := s.RecordAudit(ctx, e); err != nil {
		return nil, err
	}
	return &authv1.RecordAuditEventResponse{}, nil
}

// RemoteAudit is an AuditSink that sends events to the auth service with the internal token, for
// services that run in another process than auth.
type RemoteAudit struct {
	// Client is the auth service.
	Client authv1.AuthServiceClient
	// InternalToken is presented with every event.
	InternalToken string
}

// RecordAudit implements AuditSink.
func (r RemoteAudit) RecordAudit(ctx context.Context, e *authv1.AuditEvent) error {
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+r.InternalToken))
	_, err := r.Client.RecordAuditEvent(ctx, &authv1.RecordAuditEventRequest{Event: e})
	return err
}
