package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

var usernameRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,50}$`)

// requireAdmin lets admins and internal callers through. The guard already enforces this for
// every call; the handlers check again so the service is safe when served without it.
func (s *Service) requireAdmin(ctx context.Context) (*Caller, error) {
	if c, ok := CallerFrom(ctx); ok && c.Kind == KindInternal {
		return c, nil
	}
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if u.Role != authv1.Role_ROLE_ADMIN {
		return nil, apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "admins only")
	}
	return &Caller{Kind: KindUser, User: u}, nil
}

func checkUser(u *authv1.User, fs *apierr.Fields) {
	switch u.GetRole() {
	case authv1.Role_ROLE_ADMIN, authv1.Role_ROLE_OPERATOR, authv1.Role_ROLE_VIEWER:
	default:
		fs.Add("user.role", "want ROLE_ADMIN, ROLE_OPERATOR or ROLE_VIEWER")
	}
	for i, g := range u.GetGroupIds() {
		if g <= 0 {
			fs.Add(fmt.Sprintf("user.group_ids[%d]", i), "want a positive group id, got %d", g)
		}
	}
}

// checkGroupsExist adds a violation for every group id of u that names no executor group.
func (s *Service) checkGroupsExist(ctx context.Context, u *authv1.User, fs *apierr.Fields) error {
	if s.cfg.Groups == nil || len(u.GetGroupIds()) == 0 {
		return nil
	}
	apps, err := s.cfg.Groups.GroupApps(ctx)
	if err != nil {
		return err
	}
	for i, g := range u.GetGroupIds() {
		if _, ok := apps[g]; !ok && g > 0 {
			fs.Add(fmt.Sprintf("user.group_ids[%d]", i), "no executor group %d", g)
		}
	}
	return nil
}

func joinGroups(ids []int64) string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}

// ListUsers implements AuthService (admin only).
func (s *Service) ListUsers(ctx context.Context, req *authv1.ListUsersRequest) (*authv1.ListUsersResponse, error) {
	if _, err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	var fs apierr.Fields
	if fs.Filter("username", req.GetUsername()); fs.Err() != nil {
		return nil, fs.Err()
	}
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT id, username, role, group_ids, create_ms FROM users
		WHERE $1 = '' OR LOWER(username) LIKE LOWER($1) ESCAPE '\' ORDER BY id`), db.Contains(req.GetUsername()))
	if err != nil {
		return nil, fmt.Errorf("auth: list users: %w", err)
	}
	defer rows.Close()
	resp := &authv1.ListUsersResponse{}
	for rows.Next() {
		u, err := scanUserRow(rows)
		if err != nil {
			return nil, err
		}
		resp.Users = append(resp.Users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: list users: %w", err)
	}
	return resp, nil
}

// CreateUser implements AuthService (admin only).
func (s *Service) CreateUser(ctx context.Context, req *authv1.CreateUserRequest) (*authv1.CreateUserResponse, error) {
	if _, err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	u := req.GetUser()
	var fs apierr.Fields
	if !usernameRE.MatchString(u.GetUsername()) {
		fs.Add("user.username", "want 1-50 of [A-Za-z0-9_.@-]")
	}
	checkUser(u, &fs)
	if why := passwordProblem(u.GetUsername(), req.GetPassword()); why != "" {
		fs.Add("password", "%s", why)
	}
	if err := s.checkGroupsExist(ctx, u, &fs); err != nil {
		return nil, err
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	release, err := s.acquireHash()
	if err != nil {
		return nil, err
	}
	hash := hashPassword(req.GetPassword(), s.cfg.HashMemoryKiB)
	release()
	var id int64
	err = s.store.QueryRowContext(ctx, s.store.Q(`INSERT INTO users (username, password_hash, role, group_ids, create_ms)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`),
		u.GetUsername(), hash, int32(u.GetRole()), joinGroups(u.GetGroupIds()), s.now().UnixMilli()).Scan(&id)
	if db.IsUniqueViolation(err) {
		return nil, apierr.Field("user.username", "%q is taken", u.GetUsername())
	}
	if err != nil {
		return nil, fmt.Errorf("auth: create user: %w", err)
	}
	stored, err := s.userByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &authv1.CreateUserResponse{User: stored}, nil
}

// UpdateUser implements AuthService (admin only): role and group_ids are replaced, and a new
// password, when given, ends the user's sessions. The last admin cannot be demoted.
func (s *Service) UpdateUser(ctx context.Context, req *authv1.UpdateUserRequest) (*authv1.UpdateUserResponse, error) {
	if _, err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	u := req.GetUser()
	var fs apierr.Fields
	if u.GetId() <= 0 {
		fs.Add("user.id", "required")
	}
	checkUser(u, &fs)
	if err := s.checkGroupsExist(ctx, u, &fs); err != nil {
		return nil, err
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	var hash string
	if p := req.GetPassword(); p != "" {
		var name string
		if err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT username FROM users WHERE id = $1`), u.GetId()).Scan(&name); err != nil {
			return nil, fmt.Errorf("user %d: %w", u.GetId(), apierr.ErrUserNotFound)
		}
		if err := checkPassword("password", name, p); err != nil {
			return nil, err
		}
		release, err := s.acquireHash()
		if err != nil {
			return nil, err
		}
		hash = hashPassword(p, s.cfg.HashMemoryKiB)
		release()
	}
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("auth: update user: %w", err)
	}
	defer tx.Rollback()
	var role int32
	if err := tx.QueryRowContext(ctx, s.store.Q(`SELECT role FROM users WHERE id = $1`), u.GetId()).Scan(&role); err != nil {
		return nil, fmt.Errorf("user %d: %w", u.GetId(), apierr.ErrUserNotFound)
	}
	if authv1.Role(role) == authv1.Role_ROLE_ADMIN && u.GetRole() != authv1.Role_ROLE_ADMIN {
		if err := s.keepAnAdmin(ctx, tx, u.GetId()); err != nil {
			return nil, err
		}
	}
	if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE users SET role = $2, group_ids = $3 WHERE id = $1`),
		u.GetId(), int32(u.GetRole()), joinGroups(u.GetGroupIds())); err != nil {
		return nil, fmt.Errorf("auth: update user: %w", err)
	}
	if p := req.GetPassword(); p != "" {
		if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE users SET password_hash = $2 WHERE id = $1`), u.GetId(), hash); err != nil {
			return nil, fmt.Errorf("auth: update user: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.store.Q(`DELETE FROM sessions WHERE user_id = $1`), u.GetId()); err != nil {
			return nil, fmt.Errorf("auth: update user: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("auth: update user: %w", err)
	}
	stored, err := s.userByID(ctx, u.GetId())
	if err != nil {
		return nil, err
	}
	return &authv1.UpdateUserResponse{User: stored}, nil
}

// DeleteUser implements AuthService (admin only): the user's sessions and API tokens go with
// it. The last admin cannot be deleted.
func (s *Service) DeleteUser(ctx context.Context, req *authv1.DeleteUserRequest) (*authv1.DeleteUserResponse, error) {
	if _, err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	if req.GetId() <= 0 {
		return nil, apierr.Field("id", "required")
	}
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("auth: delete user: %w", err)
	}
	defer tx.Rollback()
	var role int32
	if err := tx.QueryRowContext(ctx, s.store.Q(`SELECT role FROM users WHERE id = $1`), req.GetId()).Scan(&role); err != nil {
		return nil, fmt.Errorf("user %d: %w", req.GetId(), apierr.ErrUserNotFound)
	}
	if authv1.Role(role) == authv1.Role_ROLE_ADMIN {
		if err := s.keepAnAdmin(ctx, tx, req.GetId()); err != nil {
			return nil, err
		}
	}
	for _, q := range []string{`DELETE FROM sessions WHERE user_id = $1`, `DELETE FROM api_tokens WHERE user_id = $1`, `DELETE FROM users WHERE id = $1`} {
		if _, err := tx.ExecContext(ctx, s.store.Q(q), req.GetId()); err != nil {
			return nil, fmt.Errorf("auth: delete user: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("auth: delete user: %w", err)
	}
	return &authv1.DeleteUserResponse{}, nil
}

// keepAnAdmin fails unless an admin other than id exists.
func (s *Service) keepAnAdmin(ctx context.Context, tx interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id int64) error {
	var n int
	if err := tx.QueryRowContext(ctx, s.store.Q(`SELECT COUNT(*) FROM users WHERE role = $1 AND id <> $2`), int32(authv1.Role_ROLE_ADMIN), id).Scan(&n); err != nil {
		return fmt.Errorf("auth: count admins: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("user %d is the last admin: %w", id, apierr.ErrLastAdmin)
	}
	return nil
}

func scanUserRow(r interface{ Scan(...any) error }) (*authv1.User, error) {
	var (
		role     int32
		groups   string
		createMs int64
		u        authv1.User
	)
	if err := r.Scan(&u.Id, &u.Username, &role, &groups, &createMs); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("auth: read user: %w", err)
	}
	fillUser(&u, role, groups, createMs)
	return &u, nil
}

// ResetPassword sets user's password outside the API, for an operator who lost the admin's
// (`jobmesh admin reset-password`): password when given, else a random one, which it returns.
// The password policy applies; the user's sessions end. An unknown user is ErrNotFound.
func (s *Service) ResetPassword(ctx context.Context, username, password string) (string, error) {
	if password == "" {
		password = randomToken(12)
	}
	if err := checkPassword("password", username, password); err != nil {
		return "", err
	}
	hash := hashPassword(password, s.cfg.HashMemoryKiB)
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("auth: reset password: %w", err)
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, s.store.Q(`SELECT id FROM users WHERE username = $1`), username).Scan(&id); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("user %q: %w", username, apierr.ErrUserNotFound)
		}
		return "", fmt.Errorf("auth: reset password: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE users SET password_hash = $2 WHERE id = $1`), id, hash); err != nil {
		return "", fmt.Errorf("auth: reset password: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.store.Q(`DELETE FROM sessions WHERE user_id = $1`), id); err != nil {
		return "", fmt.Errorf("auth: reset password: end sessions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("auth: reset password: %w", err)
	}
	s.log.WarnContext(ctx, "password reset outside the API; sessions ended", "username", username)
	return password, nil
}

// HasUsers reports whether the store has any user (then Bootstrap creates none).
func (s *Service) HasUsers(ctx context.Context) (bool, error) {
	var n int
	if err := s.store.QueryRowContext(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		return false, fmt.Errorf("auth: count users: %w", err)
	}
	return n > 0, nil
}
