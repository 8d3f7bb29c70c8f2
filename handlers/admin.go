package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Administration, with a management key, always of the key's own workspace:
//
//	GET    /keys            the workspace's keys (oldest first)
//	POST   /keys            create a key; the plaintext is in the answer, once
//	GET    /keys/{id}       one key
//	PATCH  /keys/{id}       change name, disabled, spending limit and its reset, role and scopes
//	DELETE /keys/{id}       revoke, for good
//	GET    /workspaces      the caller's workspace, then those it created (oldest first)
//	POST   /workspaces      create a workspace; the answer carries its first management key, once
//	GET    /credits         the wallet: balance, reserved, available
//	POST   /credits         top up the wallet
//	GET    /activity        requests, tokens and cost per UTC day, model and provider
//
// Another workspace's key is 404, exactly like a key that does not exist. A standard key
// on these routes is 403, and so is a management key without the route's scope (their
// permission in the route table). A key cannot create, change or revoke a key that holds
// more than it (scopes.go).

// CodeKeyLimitExceeded is the error of a request refused by its key's spending limit (429).
const CodeKeyLimitExceeded = "key_limit_exceeded"

// maxNameLen bounds key and workspace names, in characters.
const maxNameLen = 200

// maxTopUpNanos bounds one POST /credits, so that no mistyped amount can overflow a wallet.
const maxTopUpNanos = 1_000_000 * store.NanosPerUSD

// keyLimitError answers a reservation refused with store.ErrKeyLimitExceeded: 429
// key_limit_exceeded, saying what the limit is, what is used and when it resets. It
// returns nil for any other error. When only the next period can make room (no request
// of the key is in flight), Retry-After tells how long that is; while requests of the
// key are in flight their settlement may free room sooner, and clients retry as usual.
func keyLimitError(err error, now time.Time) *APIError {
	if !errors.Is(err, store.ErrKeyLimitExceeded) {
		return nil
	}
	var le *store.KeyLimitError
	if !errors.As(err, &le) {
		return newError(http.StatusTooManyRequests, CodeKeyLimitExceeded, "this API key has reached its spending limit")
	}
	period := map[string]string{store.ResetDaily: "today", store.ResetWeekly: "this week", store.ResetMonthly: "this month"}[le.LimitReset]
	if period == "" {
		period = "in total"
	}
	msg := fmt.Sprintf("this API key has reached its spending limit of %s USD: %s USD spent %s and %s USD held by requests in flight, and this request may cost up to %s USD",
		pricing.FormatUSD(le.LimitNanos), pricing.FormatUSD(le.SpentNanos), period, pricing.FormatUSD(le.ReservedNanos), pricing.FormatUSD(le.AmountNanos))
	extra := map[string]any{
		"limit_nanos": le.LimitNanos, "limit_reset": orNull(le.LimitReset), "usage_nanos": le.SpentNanos,
		"reserved_nanos": le.ReservedNanos, "required_nanos": le.AmountNanos, "resets_at": nil,
	}
	if !le.PeriodEnd.IsZero() {
		msg += "; the limit resets at " + le.PeriodEnd.UTC().Format(time.RFC3339)
		extra["resets_at"] = le.PeriodEnd.UTC().Format(time.RFC3339)
		if le.ReservedNanos == 0 {
			extra["retry_after_seconds"] = int64(max(le.PeriodEnd.Sub(now).Round(time.Second), time.Second) / time.Second)
		}
	} else {
		msg += "; a management key can raise it (PATCH /keys/{id})"
	}
	e := newError(http.StatusTooManyRequests, CodeKeyLimitExceeded, msg)
	e.Extra = extra
	return e
}

// scopesOrEmpty is a key's scopes as JSON shows them: [] rather than null for none.
func scopesOrEmpty(scopes []string) []string {
	if scopes == nil {
		return []string{}
	}
	return scopes
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// keyView is a key as the API shows it: never its hash or secret. usage is what settled
// requests of the key were charged in the current limit period (since creation for keys
// whose limit never resets, or that have no limit).
func keyView(k store.Key, sp store.KeySpend, now time.Time) map[string]any {
	status := "active"
	switch {
	case k.RevokedAt != nil:
		status = "revoked"
	case k.Disabled:
		status = "disabled"
	}
	v := map[string]any{
		"id": k.ID, "object": "key", "name": k.Name, "kind": string(k.Kind), "workspace_id": k.WorkspaceID,
		"prefix": keyPrefix + kindMarkers[k.Kind] + "_" + k.ID, "status": status,
		"disabled": k.Disabled, "revoked": k.RevokedAt != nil, "revoked_at": nil,
		"created_at": rfc3339(k.CreatedAt),
		"limit":      nil, "limit_nanos": k.LimitNanos, "limit_reset": orNull(k.LimitReset),
		"limit_remaining": nil, "limit_remaining_nanos": nil,
		"usage": costNumber(sp.SpentNanos), "usage_nanos": sp.SpentNanos, "reserved_nanos": sp.ReservedNanos,
		"period_start": nil, "resets_at": nil,
		"role": orNull(string(k.Role)), "scopes": scopesOrEmpty(k.Scopes),
	}
	if k.RevokedAt != nil {
		v["revoked_at"] = rfc3339(*k.RevokedAt)
	}
	if k.LimitNanos > 0 {
		rest := max(k.LimitNanos-sp.SpentNanos-sp.ReservedNanos, 0)
		v["limit"], v["limit_remaining"], v["limit_remaining_nanos"] = costNumber(k.LimitNanos), costNumber(rest), rest
	}
	if start, end := store.LimitPeriod(k.LimitReset, now); !start.IsZero() {
		v["period_start"], v["resets_at"] = rfc3339(start), rfc3339(end)
	}
	return v
}

// keyWithSpend reads the key's spending in its current period and builds its view.
func (g *Gateway) keyWithSpend(ctx context.Context, k store.Key) (map[string]any, error) {
	now := g.Now()
	start, _ := store.LimitPeriod(k.LimitReset, now)
	sp, err := g.Store.KeySpend(ctx, k.ID, start)
	if err != nil {
		return nil, err
	}
	return keyView(k, sp, now), nil
}

// listKeys serves GET /keys: the workspace's keys, revoked ones included, oldest first.
func (g *Gateway) listKeys(w http.ResponseWriter, r *http.Request, c *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	keys, err := g.Store.ListKeys(r.Context(), c.Key.WorkspaceID, p.store())
	env, err := storePage(keys, err, func(k store.Key) string { return k.ID }, p)
	if err != nil {
		return err
	}
	pageKeys := env["data"].([]store.Key)
	views := make([]map[string]any, 0, len(pageKeys))
	for _, k := range pageKeys {
		v, err := g.keyWithSpend(r.Context(), k)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}

// ownKey returns the workspace's key named by the path, or 404.
func (g *Gateway) ownKey(r *http.Request, c *Caller) (store.Key, error) {
	id := r.PathValue("id")
	k, err := g.Store.GetKey(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && k.WorkspaceID != c.Key.WorkspaceID) {
		e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no key %q in this workspace", id))
		e.Param = "id"
		return store.Key{}, e
	}
	return k, err
}

// getKeyByID serves GET /keys/{id}.
func (g *Gateway) getKeyByID(w http.ResponseWriter, r *http.Request, c *Caller) error {
	k, err := g.ownKey(r, c)
	if err != nil {
		return err
	}
	v, err := g.keyWithSpend(r.Context(), k)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// keyChange is what POST /keys and PATCH /keys/{id} read from their body. role and
// scopes are as given (scopes a template or explicit scopes), checked against the caller
// by grant.
type keyChange struct {
	update store.KeyUpdate
	kind   store.KeyKind
	role   *string
	scopes *string
}

// readKeyChange reads name, disabled, limit_usd or limit_nanos (null: no limit) and
// limit_reset ("daily", "weekly", "monthly", or "none" or null: never), plus kind when
// creating.
func (g *Gateway) readKeyChange(w http.ResponseWriter, r *http.Request, creating bool) (keyChange, *APIError) {
	allowed := []string{"name", "disabled", "limit_usd", "limit_nanos", "limit_reset", "role", "scopes"}
	if creating {
		allowed = append(allowed, "kind")
	}
	f, apiErr := g.readObject(w, r, allowed...)
	if apiErr != nil {
		return keyChange{}, apiErr
	}
	var kc keyChange
	if name, present, apiErr := f.name("name", false); apiErr != nil {
		return kc, apiErr
	} else if present {
		kc.update.Name = &name
	}
	if raw, ok := f["disabled"]; ok {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return kc, paramError("disabled", "disabled must be true or false")
		}
		kc.update.Disabled = &b
	}
	limit, present, apiErr := f.amount("limit_usd", "limit_nanos", true)
	if apiErr != nil {
		return kc, apiErr
	}
	if present {
		kc.update.LimitNanos = &limit
	}
	if raw, ok := f["limit_reset"]; ok {
		reset := store.ResetNever
		if !isJSONNull(raw) {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil || s == "" || (s != "none" && !store.ValidLimitReset(s)) {
				return kc, paramError("limit_reset", "limit_reset must be daily, weekly, monthly, none or null (none and null: the limit never resets)")
			}
			if s != "none" {
				reset = s
			}
		}
		kc.update.LimitReset = &reset
	}
	if raw, ok := f["role"]; ok {
		var role string
		if err := json.Unmarshal(raw, &role); err != nil {
			return kc, paramError("role", "role must be owner, admin or member")
		}
		kc.role = &role
	}
	if raw, ok := f["scopes"]; ok {
		spec, apiErr := readScopeSpec(raw)
		if apiErr != nil {
			return kc, apiErr
		}
		kc.scopes = &spec
	}
	kc.kind = store.KeyStandard
	if creating {
		if raw, ok := f["kind"]; ok {
			var kind string
			_ = json.Unmarshal(raw, &kind)
			switch store.KeyKind(kind) {
			case store.KeyStandard, store.KeyManagement:
				kc.kind = store.KeyKind(kind)
			default:
				return kc, paramError("kind", "kind must be standard or management")
			}
		}
	}
	return kc, nil
}

// readScopeSpec reads scopes: a template ("read", "write", "all") or explicit scopes, as
// one string separated by commas or as an array of strings.
func readScopeSpec(raw json.RawMessage) (string, *APIError) {
	var spec string
	if err := json.Unmarshal(raw, &spec); err == nil {
		if strings.TrimSpace(spec) == "" {
			return "", paramError("scopes", "scopes must be read, write, all, or <area>:<read|write|delete> scopes; leave scopes out for the role's defaults")
		}
		return spec, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", paramError("scopes", "scopes must be read, write, all, or a list of <area>:<read|write|delete> scopes")
	}
	if len(list) == 0 {
		// An empty list would read as "the role's defaults"; a key with no scope at all
		// is asked for with an explicit refusal instead of silently granting the defaults.
		return "", paramError("scopes", "scopes must name at least one scope; to take every scope away, revoke or disable the key")
	}
	return strings.Join(list, ","), nil
}

// grant resolves the role and scopes a management key is to hold. role "" keeps current,
// and spec nil gives the role's defaults. Defaults and templates hold what both the role
// and the caller hold; explicit scopes beyond the role are 400, beyond the caller 403, as is
// a role above the caller's.
func grant(c *Caller, role store.Role, spec *string) (store.Role, []string, *APIError) {
	s := ""
	if spec != nil {
		s = *spec
	}
	scopes, err := GrantScopes(role, s)
	if err != nil {
		return "", nil, paramError("scopes", err.Error())
	}
	if spec == nil || isScopeTemplate(s) {
		scopes = slices.DeleteFunc(scopes, func(sc string) bool { return !slices.Contains(c.Key.Scopes, sc) })
	}
	if apiErr := exceedsCaller(c, role, scopes, "the key"); apiErr != nil {
		return "", nil, apiErr
	}
	return role, scopes, nil
}

// keyRole reads a role given in a body.
func keyRole(s string) (store.Role, *APIError) {
	role, err := ParseRole(s)
	if err != nil {
		return "", paramError("role", err.Error())
	}
	return role, nil
}

// createKey serves POST /keys:
//
//	{"name": "ci", "kind": "standard", "limit_usd": "25.00", "limit_reset": "monthly"}
//	{"name": "ops", "kind": "management", "role": "admin", "scopes": "write"}
//
// Every field is optional (kind defaults to standard; a management key's role to the
// caller's, its scopes to the role's defaults less those the caller lacks). The answer is
// 201 with the key, and its plaintext in "key": shown this once, never again.
func (g *Gateway) createKey(w http.ResponseWriter, r *http.Request, c *Caller) error {
	kc, apiErr := g.readKeyChange(w, r, true)
	if apiErr != nil {
		return apiErr
	}
	var name string
	if kc.update.Name != nil {
		name = *kc.update.Name
	}
	k, plain, err := NewKey(c.Key.WorkspaceID, kc.kind, name)
	if err != nil {
		return err
	}
	k.CreatedAt = g.Now()
	if kc.kind != store.KeyManagement && (kc.role != nil || kc.scopes != nil) {
		return paramError("role", "a standard key has no role or scopes; they are for management keys")
	}
	if kc.kind == store.KeyManagement {
		role := c.Key.Role
		if kc.role != nil {
			if role, apiErr = keyRole(*kc.role); apiErr != nil {
				return apiErr
			}
		}
		if k.Role, k.Scopes, apiErr = grant(c, role, kc.scopes); apiErr != nil {
			return apiErr
		}
	}
	if kc.update.Disabled != nil {
		k.Disabled = *kc.update.Disabled
	}
	if kc.update.LimitNanos != nil {
		k.LimitNanos = *kc.update.LimitNanos
	}
	if kc.update.LimitReset != nil {
		k.LimitReset = *kc.update.LimitReset
	}
	if err := g.Store.CreateKey(r.Context(), k); err != nil {
		return err
	}
	stored, err := g.Store.GetKey(r.Context(), k.ID)
	if err != nil {
		return err
	}
	v := keyView(stored, store.KeySpend{}, g.Now())
	v["key"] = plain
	return writeJSON(w, http.StatusCreated, map[string]any{"data": v})
}

// updateKey serves PATCH /keys/{id}: the fields given change, the others stay. A
// revoked key stays revoked whatever changes. Role and scopes change as POST /keys grants
// them (a role given without scopes takes that role's defaults), and only on a key that
// holds no more than the caller: no key can raise itself or lower a stronger one.
func (g *Gateway) updateKey(w http.ResponseWriter, r *http.Request, c *Caller) error {
	target, err := g.ownStrictlyHeldKey(r, c)
	if err != nil {
		return err
	}
	kc, apiErr := g.readKeyChange(w, r, false)
	if apiErr != nil {
		return apiErr
	}
	if kc.role != nil || kc.scopes != nil {
		if target.Kind != store.KeyManagement {
			return paramError("role", "a standard key has no role or scopes; they are for management keys")
		}
		role := target.Role
		if kc.role != nil {
			if role, apiErr = keyRole(*kc.role); apiErr != nil {
				return apiErr
			}
		}
		role, scopes, apiErr := grant(c, role, kc.scopes)
		if apiErr != nil {
			return apiErr
		}
		kc.update.Role, kc.update.Scopes = &role, &scopes
	}
	// Forgotten before and after the change, so no request can cache the old key in between.
	g.forgetKey(r.PathValue("id"))
	defer g.forgetKey(r.PathValue("id"))
	k, err := g.Store.UpdateKey(r.Context(), c.Key.WorkspaceID, r.PathValue("id"), kc.update)
	if err != nil {
		return err
	}
	v, err := g.keyWithSpend(r.Context(), k)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// ownStrictlyHeldKey is ownKey, refused with 403 when the key holds a role or a scope the
// caller lacks: changing or revoking it would let a weaker key lock out a stronger one.
func (g *Gateway) ownStrictlyHeldKey(r *http.Request, c *Caller) (store.Key, error) {
	k, err := g.ownKey(r, c)
	if err != nil {
		return store.Key{}, err
	}
	if apiErr := exceedsCaller(c, k.Role, k.Scopes, "key "+k.ID); apiErr != nil {
		return store.Key{}, apiErr
	}
	return k, nil
}

// revokeKey serves DELETE /keys/{id}: the key is revoked for good (revoking twice keeps
// the first time). Requests in flight finish; new ones get 401.
func (g *Gateway) revokeKey(w http.ResponseWriter, r *http.Request, c *Caller) error {
	k, err := g.ownStrictlyHeldKey(r, c)
	if err != nil {
		return err
	}
	g.forgetKey(k.ID)
	defer g.forgetKey(k.ID)
	if err := g.Store.RevokeKey(r.Context(), k.ID, g.Now()); err != nil {
		return err
	}
	k, err = g.Store.GetKey(r.Context(), k.ID)
	if err != nil {
		return err
	}
	v, err := g.keyWithSpend(r.Context(), k)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": v, "deleted": true})
}

func workspaceView(ws store.Workspace, current string) map[string]any {
	return map[string]any{
		"id": ws.ID, "object": "workspace", "name": ws.Name, "parent_id": orNull(ws.ParentID),
		"created_at": rfc3339(ws.CreatedAt), "current": ws.ID == current,
	}
}

// listWorkspaces serves GET /workspaces: the caller's workspace first, then the
// workspaces it created through POST /workspaces, oldest first. A management key still
// acts on its own workspace only; each created workspace is run with its own keys.
func (g *Gateway) listWorkspaces(w http.ResponseWriter, r *http.Request, c *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	own, err := g.Store.GetWorkspace(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	// The list is the caller's workspace, then its children: a page that starts before
	// the children holds the caller's, and the children's page starts after p.after
	// unless p.after is the caller's.
	var items []store.Workspace
	children := p.store()
	switch p.after {
	case "":
		items = append(items, own)
	case own.ID:
		children.After = ""
	}
	kids, err := g.Store.ListChildWorkspaces(r.Context(), own.ID, children)
	env, err := storePage(append(items, kids...), err, func(ws store.Workspace) string { return ws.ID }, p)
	if err != nil {
		return err
	}
	pageWorkspaces := env["data"].([]store.Workspace)
	views := make([]map[string]any, 0, len(pageWorkspaces))
	for _, ws := range pageWorkspaces {
		views = append(views, workspaceView(ws, own.ID))
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}

// createWorkspace serves POST /workspaces: {"name": "research", "key_name": "admin"}.
// The new workspace has an empty wallet and one management key, whose plaintext is in
// the answer's management_key.key: shown this once, never again. That key has the
// creator's role and scopes (an owner's: owner with every scope), so creating a workspace
// never yields more than the creator holds, such as credits:write to an admin. It is listed by the
// creator's GET /workspaces (parent_id), but only its own keys act on it.
func (g *Gateway) createWorkspace(w http.ResponseWriter, r *http.Request, c *Caller) error {
	f, apiErr := g.readObject(w, r, "name", "key_name")
	if apiErr != nil {
		return apiErr
	}
	name, _, apiErr := f.name("name", true)
	if apiErr != nil {
		return apiErr
	}
	keyName, present, apiErr := f.name("key_name", false)
	if apiErr != nil {
		return apiErr
	}
	if !present {
		keyName = "admin"
	}
	ctx := r.Context()
	now := g.Now()
	ws := store.Workspace{ID: ids.New("ws"), Name: name, ParentID: c.Key.WorkspaceID, CreatedAt: now}
	if err := g.Store.CreateWorkspace(ctx, ws); err != nil {
		return err
	}
	k, plain, err := NewKey(ws.ID, store.KeyManagement, keyName)
	if err != nil {
		return err
	}
	k.CreatedAt = now
	k.Role, k.Scopes = c.Key.Role, slices.Clone(c.Key.Scopes)
	if err := g.Store.CreateKey(ctx, k); err != nil {
		return err
	}
	stored, err := g.Store.GetWorkspace(ctx, ws.ID)
	if err != nil {
		return err
	}
	storedKey, err := g.Store.GetKey(ctx, k.ID)
	if err != nil {
		return err
	}
	kv := keyView(storedKey, store.KeySpend{}, now)
	kv["key"] = plain
	v := workspaceView(stored, c.Key.WorkspaceID)
	v["management_key"] = kv
	return writeJSON(w, http.StatusCreated, map[string]any{"data": v})
}

func creditsView(b store.Balance) map[string]any {
	v := balanceView(b)
	v["object"] = "credits"
	v["workspace_id"] = b.WorkspaceID
	return v
}

// getCredits serves GET /credits: the workspace's wallet.
func (g *Gateway) getCredits(w http.ResponseWriter, r *http.Request, c *Caller) error {
	b, err := g.Store.GetBalance(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": creditsView(b)})
}

// topUpCredits serves POST /credits: {"amount_usd": "10.00"} (an exact decimal, as a
// string or a plain JSON number) or {"amount_nanos": 10000000000}, and an optional
// "note". The ledger records the top-up with the key that made it.
func (g *Gateway) topUpCredits(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if g.DisableCreditTopUp {
		return newError(http.StatusForbidden, CodeForbidden, "credit top-ups through the API are disabled on this gateway; the operator adds credit (caddy gateway credits add)")
	}
	f, apiErr := g.readObject(w, r, "amount_usd", "amount_nanos", "note")
	if apiErr != nil {
		return apiErr
	}
	amount, present, apiErr := f.amount("amount_usd", "amount_nanos", false)
	if apiErr != nil {
		return apiErr
	}
	if !present {
		return paramError("amount_usd", "amount_usd (a decimal USD amount such as \"10.00\") or amount_nanos is required")
	}
	if amount <= 0 || amount > maxTopUpNanos {
		return paramError(f.amountParam("amount_usd", "amount_nanos"), fmt.Sprintf("the amount must be more than 0 and at most %s USD", pricing.FormatUSD(maxTopUpNanos)))
	}
	note, _, apiErr := f.name("note", false)
	if apiErr != nil {
		return apiErr
	}
	ledgerNote := "api top-up by key " + c.Key.ID
	if note != "" {
		ledgerNote += ": " + note
	}
	b, err := g.Store.AddCredits(r.Context(), c.Key.WorkspaceID, amount, ledgerNote)
	if err != nil {
		return err
	}
	v := creditsView(b)
	v["added_nanos"] = amount
	return writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// defaultActivityDays is the range of GET /activity without from: the last 30 UTC days,
// today included.
const defaultActivityDays = 30

// activity serves GET /activity: the workspace's generations summed per UTC day, model
// and provider, ordered by day, model and provider, over [from, to). from and to are
// dates (YYYY-MM-DD, midnight UTC) or RFC 3339 times; to defaults to the end of today
// (UTC) and from to 30 days before to. key_id keeps one key's requests. totals sums the
// whole range, whatever the page.
func (g *Gateway) activity(w http.ResponseWriter, r *http.Request, c *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	now := g.Now().UTC()
	to := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 1)
	if t, ok, apiErr := timeParam(q, "to"); apiErr != nil {
		return apiErr
	} else if ok {
		to = t
	}
	from := to.AddDate(0, 0, -defaultActivityDays)
	if t, ok, apiErr := timeParam(q, "from"); apiErr != nil {
		return apiErr
	} else if ok {
		from = t
	}
	if !from.Before(to) {
		return paramError("to", fmt.Sprintf("to (%s) must be after from (%s)", rfc3339(to), rfc3339(from)))
	}
	aq := store.ActivityQuery{WorkspaceID: c.Key.WorkspaceID, From: from, To: to, Limit: p.limit}
	if p.after != "" {
		k, ok := parseActivityID(p.after)
		if !ok {
			return afterError(p.after)
		}
		aq.After = &k
	}
	if vs, ok := q["key_id"]; ok {
		aq.KeyID = first(vs)
		k, err := g.Store.GetKey(r.Context(), aq.KeyID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && k.WorkspaceID != c.Key.WorkspaceID) {
			e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no key %q in this workspace", aq.KeyID))
			e.Param = "key_id"
			return e
		}
		if err != nil {
			return err
		}
	}
	rows, err := g.Store.Activity(r.Context(), aq)
	env, err := storePage(rows, err, activityID, p)
	if err != nil {
		return err
	}
	totals, err := g.Store.ActivityTotals(r.Context(), aq)
	if err != nil {
		return err
	}
	pageRows := env["data"].([]store.ActivityRow)
	views := make([]map[string]any, 0, len(pageRows))
	for _, a := range pageRows {
		v := activityView(a)
		v["id"], v["object"], v["date"], v["model"], v["provider"] = activityID(a), "activity", a.Day.Format(time.DateOnly), a.Model, a.Provider
		views = append(views, v)
	}
	env["data"] = views
	env["from"], env["to"] = rfc3339(from), rfc3339(to)
	env["totals"] = activityView(totals)
	return writeJSON(w, http.StatusOK, env)
}

// activityID is the id of an activity row: its date, model and provider, joined by |.
func activityID(a store.ActivityRow) string {
	return a.Day.Format(time.DateOnly) + "|" + a.Model + "|" + a.Provider
}

// parseActivityID reads an activityID. The provider is what follows the last |: provider
// names are configuration identifiers, model names may hold anything.
func parseActivityID(id string) (store.ActivityKey, bool) {
	date, rest, ok := strings.Cut(id, "|")
	i := strings.LastIndexByte(rest, '|')
	if !ok || i < 0 {
		return store.ActivityKey{}, false
	}
	day, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return store.ActivityKey{}, false
	}
	return store.ActivityKey{Day: day, Model: rest[:i], Provider: rest[i+1:]}, true
}

// activityView is a sum of generations. prompt_tokens and completion_tokens are whole
// prompts and completions, as GET /generations counts them.
func activityView(a store.ActivityRow) map[string]any {
	return map[string]any{
		"requests":          a.Requests,
		"prompt_tokens":     a.InputTokens + a.CacheReadTokens + a.CacheWriteTokens,
		"completion_tokens": a.OutputTokens + a.ReasoningTokens,
		"usage": map[string]any{
			"input_tokens": a.InputTokens, "cache_read_tokens": a.CacheReadTokens, "cache_write_tokens": a.CacheWriteTokens,
			"output_tokens": a.OutputTokens, "reasoning_tokens": a.ReasoningTokens,
		},
		"cost": costNumber(a.CostNanos), "cost_nanos": a.CostNanos,
	}
}

// timeParam reads a date (YYYY-MM-DD, midnight UTC) or an RFC 3339 time.
func timeParam(q url.Values, name string) (time.Time, bool, *APIError) {
	vs, ok := q[name]
	if !ok {
		return time.Time{}, false, nil
	}
	v := strings.TrimSpace(first(vs))
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, true, nil
	}
	// An unescaped '+' of a UTC offset arrives as a space.
	for _, s := range []string{v, strings.Replace(v, " ", "+", 1)} {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t.UTC(), true, nil
		}
	}
	return time.Time{}, false, paramError(name, fmt.Sprintf("%s %q is neither a date (YYYY-MM-DD) nor an RFC 3339 time (2025-05-06T12:00:00Z)", name, v))
}

// jsonFields is a request body's top-level fields, read one by one so that each
// mistake names its field.
type jsonFields map[string]json.RawMessage

// readObject reads a JSON object body that has only the allowed fields. An empty body
// is an empty object.
func (g *Gateway) readObject(w http.ResponseWriter, r *http.Request, allowed ...string) (jsonFields, *APIError) {
	if r.ContentLength == 0 {
		return jsonFields{}, nil
	}
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return nil, apiErr
	}
	var f jsonFields
	if err := json.Unmarshal(body, &f); err != nil || f == nil {
		return nil, newError(http.StatusBadRequest, CodeValidation, "the request body must be a JSON object")
	}
	for k := range f {
		if !slices.Contains(allowed, k) {
			return nil, paramError(k, fmt.Sprintf("unknown field %q; this endpoint takes %s", k, strings.Join(allowed, ", ")))
		}
	}
	return f, nil
}

// str reads a string field; null counts as absent.
func (f jsonFields) str(key string) (string, bool, *APIError) {
	raw, ok := f[key]
	if !ok || isJSONNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, paramError(key, key+" must be a string")
	}
	return s, true, nil
}

// name reads a name: a string of at most maxNameLen characters, non-blank when required.
func (f jsonFields) name(key string, required bool) (string, bool, *APIError) {
	s, present, apiErr := f.str(key)
	if apiErr != nil {
		return "", false, apiErr
	}
	s = strings.TrimSpace(s)
	if required && s == "" {
		return "", false, paramError(key, key+" is required")
	}
	if utf8.RuneCountInString(s) > maxNameLen {
		return "", false, paramError(key, fmt.Sprintf("%s is longer than %d characters", key, maxNameLen))
	}
	return s, present, nil
}

// amount reads an amount of money given either as usdKey (an exact decimal USD amount:
// a string such as "10.50", or a plain JSON number) or as nanosKey (an integer of
// nanodollars), never both. With nullable, a null means "none" and reads as 0.
func (f jsonFields) amount(usdKey, nanosKey string, nullable bool) (int64, bool, *APIError) {
	rawUSD, hasUSD := f[usdKey]
	rawNanos, hasNanos := f[nanosKey]
	switch {
	case hasUSD && hasNanos:
		return 0, false, paramError(usdKey, fmt.Sprintf("give %s or %s, not both", usdKey, nanosKey))
	case hasUSD:
		if isJSONNull(rawUSD) {
			if !nullable {
				return 0, false, paramError(usdKey, usdKey+" must not be null")
			}
			return 0, true, nil
		}
		text := string(bytes.TrimSpace(rawUSD))
		var s string
		if json.Unmarshal(rawUSD, &s) == nil {
			text = s
		} else if !isJSONNumber(rawUSD) {
			return 0, false, paramError(usdKey, usdKey+` must be a decimal USD amount such as "10.50"`)
		}
		n, err := pricing.ParseUSD(text)
		if err != nil {
			return 0, false, paramError(usdKey, fmt.Sprintf("%s: %v (write a decimal USD amount such as \"10.50\")", usdKey, err))
		}
		return n, true, nil
	case hasNanos:
		if isJSONNull(rawNanos) {
			if !nullable {
				return 0, false, paramError(nanosKey, nanosKey+" must not be null")
			}
			return 0, true, nil
		}
		v, ok := jsonInt(rawNanos)
		if !ok || v < 0 {
			return 0, false, paramError(nanosKey, nanosKey+" must be a non-negative integer of nanodollars")
		}
		return v, true, nil
	}
	return 0, false, nil
}

// amountParam names the amount field the request used, for errors about its value.
func (f jsonFields) amountParam(usdKey, nanosKey string) string {
	if _, ok := f[nanosKey]; ok {
		return nanosKey
	}
	return usdKey
}

// isJSONNumber tells whether raw is a JSON number literal (a string holding digits is not).
func isJSONNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '"' {
		return false
	}
	var n json.Number
	return json.Unmarshal(raw, &n) == nil
}

// jsonInt reads a JSON number literal that is an integer.
func jsonInt(raw json.RawMessage) (int64, bool) {
	if !isJSONNumber(raw) {
		return 0, false
	}
	var n json.Number
	_ = json.Unmarshal(raw, &n)
	v, err := n.Int64()
	return v, err == nil
}
