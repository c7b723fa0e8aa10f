// Package restconn calls jobmesh's gRPC services through the gateway's REST API: Conn is a
// grpc.ClientConnInterface, so the generated clients (schedulerv1.NewJobServiceClient, …) work on
// it unchanged. Each method's route comes from its google.api.http annotation in the generated
// descriptors, messages travel as protojson, server streams as grpc-gateway's newline-delimited
// {"result": …} chunks, and the gateway's error bodies come back as gRPC status errors, so a caller
// tells "not found" from "unavailable" the same way over REST as over gRPC.
package restconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// Conn sends RPCs to a gateway's REST API. It is safe for concurrent use.
type Conn struct {
	base   *url.URL
	client *http.Client
	token  string
}

// New returns a Conn to the gateway at endpoint (http or https URL, e.g. "http://127.0.0.1:8080";
// a path prefix is kept). client carries the TLS settings (nil means http.DefaultClient); a
// non-empty token is sent as "Authorization: Bearer <token>" on every call.
func New(endpoint string, client *http.Client, token string) (*Conn, error) {
	u, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = http.DefaultClient
	}
	return &Conn{base: u, client: client, token: token}, nil
}

// ParseEndpoint checks that endpoint is an http or https URL with a host and nothing after its
// path.
func ParseEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("endpoint %q: want the gateway's http:// or https:// URL, e.g. http://127.0.0.1:8080", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// Endpoint is the gateway's URL.
func (c *Conn) Endpoint() string { return c.base.String() }

// Invoke performs a unary RPC: method is the full gRPC method name
// ("/jobmesh.scheduler.v1.JobService/GetJob"), args and reply proto messages.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "restconn: %s: request %T is not a proto message", method, args)
	}
	out, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "restconn: %s: reply %T is not a proto message", method, reply)
	}
	resp, err := c.do(ctx, method, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return transportError(ctx, c.base, err)
	}
	if err := unmarshal(b, out); err != nil {
		return status.Errorf(codes.Internal, "%s answered %s: %v", c.base, method, err)
	}
	return nil
}

// NewStream opens a server stream: the request is sent on the stream's first SendMsg, and
// RecvMsg reads the gateway's chunks until the stream ends (io.EOF) or fails (a status error).
// Client and bidirectional streams are not served by the gateway.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "restconn: %s: client streams are not served over REST", method)
	}
	return &stream{ctx: ctx, conn: c, method: method}, nil
}

// do sends req as the HTTP request the method's annotation describes and returns a 2xx response;
// any other answer is turned into a status error.
func (c *Conn) do(ctx context.Context, method string, req proto.Message) (*http.Response, error) {
	hreq, err := c.request(ctx, method, req)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(hreq)
	if err != nil {
		return nil, transportError(ctx, c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, errorFromBody(resp.StatusCode, b)
	}
	return resp, nil
}

// request builds the HTTP request of method for req.
func (c *Conn) request(ctx context.Context, method string, req proto.Message) (*http.Request, error) {
	rule, err := httpRule(method)
	if err != nil {
		return nil, err
	}
	verb, tmpl := ruleVerb(rule)
	if verb == "" {
		return nil, status.Errorf(codes.Unimplemented, "restconn: %s has no REST route", method)
	}
	msg := req.ProtoReflect()
	path, used, err := expand(tmpl, msg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", method, err)
	}
	var body io.Reader
	switch field := rule.GetBody(); field {
	case "":
		q, err := query(msg, used)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "restconn: %s: %v", method, err)
		}
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
	case "*":
		b, err := marshal(req)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	default:
		fd := msg.Descriptor().Fields().ByName(protoreflect.Name(field))
		if fd == nil || fd.Message() == nil {
			return nil, status.Errorf(codes.Internal, "restconn: %s: body field %q is not a message field", method, field)
		}
		b, err := marshal(msg.Get(fd).Message().Interface())
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
		// The other fields (an update_mask) go in the query: without it the gateway infers the
		// mask from the body's fields, which leaves out every field being set to its zero value.
		used[fd.Name()] = true
		q, err := query(msg, used)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "restconn: %s: %v", method, err)
		}
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
	}
	hreq, err := http.NewRequestWithContext(ctx, verb, c.base.String()+path, body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "restconn: %s: %v", method, err)
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	if c.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	return hreq, nil
}

// httpRule finds the google.api.http annotation of a full method name.
func httpRule(method string) (*annotations.HttpRule, error) {
	name := strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", ".")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "restconn: unknown method %s", method)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "restconn: %s is not a method", method)
	}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return nil, status.Errorf(codes.Unimplemented, "restconn: %s has no REST route", method)
	}
	return rule, nil
}

func ruleVerb(r *annotations.HttpRule) (verb, path string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete
	case *annotations.HttpRule_Custom:
		return p.Custom.GetKind(), p.Custom.GetPath()
	}
	return "", ""
}

// expand fills a path template's {field.path} (or {field.path=pattern}) variables from msg and
// returns the path and the top-level fields it used.
func expand(tmpl string, msg protoreflect.Message) (string, map[protoreflect.Name]bool, error) {
	var b strings.Builder
	used := map[protoreflect.Name]bool{}
	for {
		open := strings.IndexByte(tmpl, '{')
		if open < 0 {
			b.WriteString(tmpl)
			return b.String(), used, nil
		}
		end := strings.IndexByte(tmpl[open:], '}')
		if end < 0 {
			return "", nil, fmt.Errorf("route %q: unclosed variable", tmpl)
		}
		b.WriteString(tmpl[:open])
		fieldPath, _, _ := strings.Cut(tmpl[open+1:open+end], "=")
		v, err := fieldValue(msg, fieldPath)
		if err != nil {
			return "", nil, err
		}
		if v == "" {
			return "", nil, fmt.Errorf("%s: required", fieldPath)
		}
		b.WriteString(url.PathEscape(v))
		top, _, _ := strings.Cut(fieldPath, ".")
		used[protoreflect.Name(top)] = true
		tmpl = tmpl[open+end+1:]
	}
}

// fieldValue reads a dotted path of fields down to a scalar and formats it.
func fieldValue(msg protoreflect.Message, path string) (string, error) {
	parts := strings.Split(path, ".")
	for i, name := range parts {
		fd := msg.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return "", fmt.Errorf("route field %q: no such field", path)
		}
		if i < len(parts)-1 {
			if fd.Message() == nil {
				return "", fmt.Errorf("route field %q: %s is not a message", path, name)
			}
			msg = msg.Get(fd).Message()
			continue
		}
		if fd.IsList() || fd.IsMap() || fd.Message() != nil {
			return "", fmt.Errorf("route field %q: not a scalar", path)
		}
		if !msg.Has(fd) {
			return "", nil
		}
		return scalar(fd, msg.Get(fd)), nil
	}
	return "", fmt.Errorf("route field %q: empty", path)
}

// query encodes the set scalar (and repeated scalar) fields of msg not in skip, by proto name.
func query(msg protoreflect.Message, skip map[protoreflect.Name]bool) (url.Values, error) {
	q := url.Values{}
	var err error
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if skip[fd.Name()] {
			return true
		}
		name := string(fd.Name())
		switch {
		case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.FieldMask":
			// grpc-gateway reads a field mask from the query as comma-separated paths.
			fm, ok := v.Message().Interface().(*fieldmaskpb.FieldMask)
			if !ok {
				err = fmt.Errorf("field %s: not a field mask", name)
				return false
			}
			if len(fm.GetPaths()) > 0 {
				q.Set(name, strings.Join(fm.GetPaths(), ","))
			}
		case fd.IsMap() || fd.Message() != nil:
			err = fmt.Errorf("field %s: only scalar fields go in a query", name)
			return false
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				q.Add(name, scalar(fd, l.Get(i)))
			}
		default:
			q.Set(name, scalar(fd, v))
		}
		return true
	})
	return q, err
}

func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.BytesKind:
		return string(v.Bytes())
	}
	return v.String()
}

func marshal(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "restconn: encode %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return b, nil
}

// unmarshal decodes an answer, ignoring fields a newer gateway may add.
func unmarshal(b []byte, m proto.Message) error {
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// errorBody is the gateway's error answer (google.rpc.Status as JSON); details are not read.
type errorBody struct {
	Code    *int   `json:"code"`
	Message string `json:"message"`
}

// errorFromBody turns a non-2xx answer into a status error: the code and message of the
// gateway's error body (or of the error chunk a stream answers with), else the gRPC code of the HTTP status (a proxy in front of the gateway
// answering 502, say).
func errorFromBody(httpStatus int, b []byte) error {
	var e errorBody
	if json.Unmarshal(b, &e) == nil && e.Code != nil && *e.Code != 0 {
		return status.Error(codes.Code(*e.Code), e.Message)
	}
	// A stream refused before its first message answers its error as a stream chunk.
	var c chunk
	if json.Unmarshal(b, &c) == nil && c.Error != nil && c.Error.Code != nil && *c.Error.Code != 0 {
		return status.Error(codes.Code(*c.Error.Code), c.Error.Message)
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" || !strings.ContainsFunc(msg, func(r rune) bool { return r > ' ' }) || len(msg) > 200 {
		msg = http.StatusText(httpStatus)
	}
	return status.Error(codeOfHTTP(httpStatus), fmt.Sprintf("HTTP %d: %s", httpStatus, msg))
}

// codeOfHTTP is the inverse of grpc-gateway's HTTPStatusFromCode, as far as it goes.
func codeOfHTTP(s int) codes.Code {
	switch s {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// transportError classifies a failed request: the caller's context ending, the gateway not
// answering (Unavailable), or anything else (a certificate that does not verify, say), kept as
// it is.
func transportError(ctx context.Context, base *url.URL, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return status.Errorf(codes.Unavailable, "cannot reach the gateway at %s: %v", base, unwrapURL(err))
	}
	return fmt.Errorf("gateway at %s: %w", base, unwrapURL(err))
}

// unwrapURL drops net/http's `Get "http://…": ` prefix; the caller names the gateway itself.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// stream is a server stream over one HTTP response of newline-delimited JSON chunks.
type stream struct {
	ctx    context.Context
	conn   *Conn
	method string
	resp   *http.Response
	lines  *bufio.Reader
	done   bool
}

// The header, trailer and metadata of a stream: REST has none to give.
func (s *stream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (s *stream) Trailer() metadata.MD         { return metadata.MD{} }
func (s *stream) CloseSend() error             { return nil }
func (s *stream) Context() context.Context     { return s.ctx }

// SendMsg sends the one request of the server stream.
func (s *stream) SendMsg(m any) error {
	if s.resp != nil {
		return status.Errorf(codes.Internal, "restconn: %s: a server stream takes one request", s.method)
	}
	req, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "restconn: %s: request %T is not a proto message", s.method, m)
	}
	resp, err := s.conn.do(s.ctx, s.method, req)
	if err != nil {
		return err
	}
	s.resp, s.lines = resp, bufio.NewReaderSize(resp.Body, 64<<10)
	return nil
}

// chunk is one line of a grpc-gateway stream.
type chunk struct {
	Result json.RawMessage `json:"result"`
	Error  *errorBody      `json:"error"`
}

// RecvMsg reads the next chunk into m: io.EOF at the stream's end, a status error when the
// stream failed.
func (s *stream) RecvMsg(m any) error {
	if s.resp == nil {
		return status.Errorf(codes.Internal, "restconn: %s: RecvMsg before SendMsg", s.method)
	}
	if s.done {
		return io.EOF
	}
	out, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "restconn: %s: reply %T is not a proto message", s.method, m)
	}
	for {
		line, err := s.lines.ReadBytes('\n')
		switch {
		case err == nil && len(bytes.TrimSpace(line)) == 0:
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) == 0:
			s.finish()
			return io.EOF
		case err != nil: // cut short, mid-chunk or not
			s.finish()
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return transportError(s.ctx, s.conn.base, err)
		}
		var c chunk
		if jerr := json.Unmarshal(line, &c); jerr != nil {
			s.finish()
			return status.Errorf(codes.Internal, "%s answered %s with a bad chunk: %v", s.conn.base, s.method, jerr)
		}
		if c.Error != nil {
			s.finish()
			code := codes.Unknown
			if c.Error.Code != nil {
				code = codes.Code(*c.Error.Code)
			}
			return status.Error(code, c.Error.Message)
		}
		if err := unmarshal(c.Result, out); err != nil {
			s.finish()
			return status.Errorf(codes.Internal, "%s answered %s: %v", s.conn.base, s.method, err)
		}
		return nil
	}
}

func (s *stream) finish() {
	s.done = true
	s.resp.Body.Close()
}
