package auth

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

// CreateApiToken implements AuthService: the token acts as the caller (same role and groups, as
// they change) until it expires or is revoked. Its secret is returned once and stored hashed.
func (s *Service) CreateApiToken(ctx context.Context, req *authv1.CreateApiTokenRequest) (*authv1.CreateApiTokenResponse, error) {
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	t := req.GetToken()
	var fs apierr.Fields
	if n := len([]rune(t.GetName())); n < 1 || n > 128 {
		fs.Add("token.name", "want 1-128 characters, got %d", n)
	}
	now := s.now()
	var expMs int64
	if t.GetExpireTime() != nil {
		exp := t.GetExpireTime().AsTime()
		if err := t.GetExpireTime().CheckValid(); err != nil || !exp.After(now) {
			fs.Add("token.expire_time", "want a time in the future")
		}
		expMs = exp.UnixMilli()
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	secret := apiTokenPrefix + randomToken(32)
	var id int64
	if err := s.store.QueryRowContext(ctx, s.store.Q(`INSERT INTO api_tokens (token_hash, user_id, name, expire_ms, create_ms)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`), tokenHash(secret), u.Id, t.GetName(), expMs, now.UnixMilli()).Scan(&id); err != nil {
		return nil, fmt.Errorf("auth: create api token: %w", err)
	}
	s.log.InfoContext(ctx, "api token created", "username", u.Username, "token_id", id)
	return &authv1.CreateApiTokenResponse{Secret: secret, Token: &authv1.ApiToken{
		Id: id, Name: t.GetName(), UserId: u.Id, ExpireTime: msTime(expMs), CreateTime: timestamppb.New(time.UnixMilli(now.UnixMilli())),
	}}, nil
}

// ListApiTokens implements AuthService: the caller's tokens, or every token for an admin.
func (s *Service) ListApiTokens(ctx context.Context, _ *authv1.ListApiTokensRequest) (*authv1.ListApiTokensResponse, error) {
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	all := u.Role == authv1.Role_ROLE_ADMIN
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT id, name, user_id, expire_ms, create_ms, last_used_ms FROM api_tokens
		WHERE $1 OR user_id = $2 ORDER BY id`), all, u.Id)
	if err != nil {
		return nil, fmt.Errorf("auth: list api tokens: %w", err)
	}
	defer rows.Close()
	resp := &authv1.ListApiTokensResponse{}
	for rows.Next() {
		var (
			t                       authv1.ApiToken
			expMs, createMs, usedMs int64
		)
		if err := rows.Scan(&t.Id, &t.Name, &t.UserId, &expMs, &createMs, &usedMs); err != nil {
			return nil, fmt.Errorf("auth: list api tokens: %w", err)
		}
		t.ExpireTime, t.CreateTime, t.LastUsedTime = msTime(expMs), msTime(createMs), msTime(usedMs)
		resp.Tokens = append(resp.Tokens, &t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: list api tokens: %w", err)
	}
	return resp, nil
}

// RevokeApiToken implements AuthService: owners revoke their tokens, admins any token. The
// token stops working at once.
func (s *Service) RevokeApiToken(ctx context.Context, req *authv1.RevokeApiTokenRequest) (*authv1.RevokeApiTokenResponse, error) {
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetId() <= 0 {
		return nil, apierr.Field("id", "required")
	}
	var owner int64
	if err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT user_id FROM api_tokens WHERE id = $1`), req.GetId()).Scan(&owner); err != nil {
		return nil, fmt.Errorf("api token %d: %w", req.GetId(), apierr.ErrAPITokenNotFound)
	}
	if owner != u.Id && u.Role != authv1.Role_ROLE_ADMIN {
		return nil, apierr.Status(codes.PermissionDenied, apierr.ReasonNotTokenOwner, "not your token")
	}
	if _, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM api_tokens WHERE id = $1`), req.GetId()); err != nil {
		return nil, fmt.Errorf("auth: revoke api token: %w", err)
	}
	s.log.InfoContext(ctx, "api token revoked", "username", u.Username, "token_id", req.GetId())
	return &authv1.RevokeApiTokenResponse{}, nil
}

// msTime is a stored millisecond time as a timestamp; 0 (never, or not yet) is unset.
func msTime(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms))
}
