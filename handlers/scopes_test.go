package handlers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// grantKey stores a management key of ws with the given role and scopes.
func (a *adminGateway) grantKey(ws string, role store.Role, scopes []string) string {
	a.t.Helper()
	k, plain, err := NewKey(ws, store.KeyManagement, string(role))
	if err != nil {
		a.t.Fatal(err)
	}
	k.Role, k.Scopes, k.CreatedAt = role, scopes, a.g.Now()
	if err := a.s.CreateKey(context.Background(), k); err != nil {
		a.t.Fatal(err)
	}
	return plain
}

// wantRefusal checks an answer is 403 with the code, and for missing_scope that it names
// the scope in its message, param and required_scope.
func wantRefusal(t *testing.T, what string, status int, v map[string]any, code, scope string) {
	t.Helper()
	e, _ := v["error"].(map[string]any)
	if status != http.StatusForbidden || e["code"] != code {
		t.Fatalf("%s: %d %v, want 403 %s", what, status, v, code)
	}
	if scope != "" && (v["required_scope"] != scope || e["param"] != "scope" || !strings.Contains(v["message"].(string), scope)) {
		t.Fatalf("%s: %v, want it to name the missing scope %s", what, v, scope)
	}
}

// Every management row of the route table, called by each kind of caller: a standard key is
// refused everywhere, an owner nowhere, an admin only POST /credits (credits:write), a member
// every write and delete (and notification administration, which is for owners and admins),
// and a key narrowed to keys:read everything but reading keys, each refusal naming the scope.
func TestManagementRoutesByRoleAndScope(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	ws, std, _ := a.workspace(100 * usdNanos)
	callers := []struct {
		name   string
		key    string
		role   store.Role
		scopes []string
	}{
		{"owner", a.grantKey(ws, store.RoleOwner, RoleScopes(store.RoleOwner)), store.RoleOwner, RoleScopes(store.RoleOwner)},
		{"admin", a.grantKey(ws, store.RoleAdmin, RoleScopes(store.RoleAdmin)), store.RoleAdmin, RoleScopes(store.RoleAdmin)},
		{"member", a.grantKey(ws, store.RoleMember, RoleScopes(store.RoleMember)), store.RoleMember, RoleScopes(store.RoleMember)},
		{"admin with keys:read", a.grantKey(ws, store.RoleAdmin, []string{"keys:read"}), store.RoleAdmin, []string{"keys:read"}},
	}
	if slices.Contains(RoleScopes(store.RoleAdmin), "credits:write") || !slices.Contains(RoleScopes(store.RoleOwner), "credits:write") {
		t.Fatalf("credits:write is held by owners only: owner %v, admin %v", RoleScopes(store.RoleOwner), RoleScopes(store.RoleAdmin))
	}
	for _, sc := range RoleScopes(store.RoleMember) {
		if !strings.HasSuffix(sc, ":read") {
			t.Fatalf("member default %s is not a read scope", sc)
		}
	}
	rows := 0
	for _, rt := range routeTable {
		if rt.perm.key != managementKey {
			continue
		}
		rows++
		path := strings.NewReplacer("{id}", "nope").Replace(rt.path)
		row := rt.method + " " + rt.path
		status, v := a.do(rt.method, path, std, "{}")
		if e, _ := v["error"].(map[string]any); status != http.StatusForbidden || e["code"] != CodeForbidden {
			t.Errorf("%s with a standard key: %d %v, want 403", row, status, v)
		}
		for _, c := range callers {
			status, v := a.do(rt.method, path, c.key, "{}")
			what := row + " as " + c.name
			switch {
			case rt.perm.ownerOrAdmin && c.role == store.RoleMember:
				wantRefusal(t, what, status, v, CodeRoleRequired, "")
			case !slices.Contains(c.scopes, rt.perm.scope()):
				wantRefusal(t, what, status, v, CodeMissingScope, rt.perm.scope())
			case status == http.StatusForbidden || status == http.StatusUnauthorized:
				t.Errorf("%s: %d %v, want it admitted", what, status, v)
			}
		}
	}
	if rows < 10 {
		t.Fatalf("only %d management rows", rows)
	}
	// Spelled out, the case the issue starts from: an admin cannot add money.
	_, _, adminKey := ws, std, callers[1].key
	status, v := a.do(http.MethodPost, "/credits", adminKey, `{"amount_usd": "1000000"}`)
	wantRefusal(t, "POST /credits as admin", status, v, CodeMissingScope, "credits:write")
	a.mustDo(200, http.MethodPost, "/credits", callers[0].key, `{"amount_usd": "1"}`)
	status, v = a.do(http.MethodPost, "/keys", callers[2].key, `{"name": "mine"}`)
	wantRefusal(t, "POST /keys as member", status, v, CodeMissingScope, "keys:write")
}

// keyGrant reads role and scopes of a key view.
func keyGrant(v map[string]any) (string, []string) {
	role, _ := v["role"].(string)
	var scopes []string
	for _, s := range v["scopes"].([]any) {
		scopes = append(scopes, s.(string))
	}
	return role, scopes
}

func data(v map[string]any) map[string]any { return v["data"].(map[string]any) }

// A key never gets more than its creator: not a higher role, not a scope the creator lacks,
// not by changing itself, and a weaker key cannot change or revoke a stronger one. Templates
// expand to explicit lists cut to the role, and GET /key shows them.
func TestGrantNeverExceedsCaller(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	ws, std, owner := a.workspace(0)

	// The bootstrap key of a workspace (NewKey) is an owner with every scope.
	role, scopes := keyGrant(data(a.mustDo(200, http.MethodGet, "/key", owner, "")))
	if role != "owner" || !reflect.DeepEqual(scopes, managementScopes) {
		t.Fatalf("GET /key of the first management key: %s %v", role, scopes)
	}
	if role, scopes := keyGrant(data(a.mustDo(200, http.MethodGet, "/key", std, ""))); role != "" || scopes != nil {
		t.Fatalf("GET /key of a standard key shows %q %v", role, scopes)
	}

	created := data(a.mustDo(201, http.MethodPost, "/keys", owner, `{"kind": "management", "role": "admin"}`))
	admin := created["key"].(string)
	role, scopes = keyGrant(created)
	if role != "admin" || !reflect.DeepEqual(scopes, RoleScopes(store.RoleAdmin)) {
		t.Fatalf("admin key created with %s %v", role, scopes)
	}
	if role, got := keyGrant(data(a.mustDo(200, http.MethodGet, "/key", admin, ""))); role != "admin" || !reflect.DeepEqual(got, scopes) {
		t.Fatalf("GET /key of the admin key: %s %v", role, got)
	}

	// Templates, explicit lists and the role's ceiling.
	for _, tc := range []struct{ body, role string }{
		{`{"kind": "management", "role": "member", "scopes": "all"}`, "member"},
		{`{"kind": "management", "role": "owner", "scopes": "read"}`, "owner"},
		{`{"kind": "management", "role": "admin", "scopes": "write"}`, "admin"},
		{`{"kind": "management", "scopes": ["keys:read", "credits:write"]}`, "owner"},
	} {
		role, got := keyGrant(data(a.mustDo(201, http.MethodPost, "/keys", owner, tc.body)))
		want := map[string][]string{
			`{"kind": "management", "role": "member", "scopes": "all"}`:        RoleScopes(store.RoleMember),
			`{"kind": "management", "role": "owner", "scopes": "read"}`:        RoleScopes(store.RoleMember),
			`{"kind": "management", "role": "admin", "scopes": "write"}`:       withoutDelete(RoleScopes(store.RoleAdmin)),
			`{"kind": "management", "scopes": ["keys:read", "credits:write"]}`: {"credits:write", "keys:read"},
		}[tc.body]
		if role != tc.role || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s %v, want %s %v", tc.body, role, got, tc.role, want)
		}
	}
	for _, body := range []string{
		`{"kind": "management", "role": "member", "scopes": "keys:write"}`,
		`{"kind": "management", "scopes": "keys:fly"}`,
		`{"kind": "management", "role": "boss"}`,
		`{"kind": "standard", "role": "owner"}`,
		`{"kind": "management", "scopes": []}`,
		`{"kind": "management", "scopes": " "}`,
		`{"kind": "management", "scopes": 7}`,
	} {
		if status, v := a.do(http.MethodPost, "/keys", owner, body); status != 400 {
			t.Errorf("POST /keys %s: %d %v, want 400", body, status, v)
		}
	}

	// An admin cannot make an owner, nor hold credits:write, nor give what it lacks.
	status, v := a.do(http.MethodPost, "/keys", admin, `{"kind": "management", "role": "owner"}`)
	wantRefusal(t, "admin creating an owner", status, v, CodeGrantExceedsCaller, "")
	if v["exceeding_role"] != "owner" {
		t.Fatalf("admin creating an owner: %v", v)
	}
	narrow := a.grantKey(ws, store.RoleAdmin, []string{"keys:read", "keys:write"})
	status, v = a.do(http.MethodPost, "/keys", narrow, `{"kind": "management", "role": "member", "scopes": "keys:read,credits:read"}`)
	wantRefusal(t, "narrow admin granting credits:read", status, v, CodeGrantExceedsCaller, "")
	if !reflect.DeepEqual(v["exceeding_scopes"], []any{"credits:read"}) || !strings.Contains(v["message"].(string), "credits:read") {
		t.Fatalf("narrow admin granting credits:read: %v", v)
	}
	// Its defaults and templates are cut to what it holds.
	_, got := keyGrant(data(a.mustDo(201, http.MethodPost, "/keys", narrow, `{"kind": "management", "role": "member"}`)))
	if !reflect.DeepEqual(got, []string{"keys:read"}) {
		t.Fatalf("member made by a keys-only admin holds %v", got)
	}

	// Nobody raises itself.
	adminID := kidOf(t, admin)
	status, v = a.do(http.MethodPatch, "/keys/"+adminID, admin, `{"role": "owner"}`)
	wantRefusal(t, "admin making itself owner", status, v, CodeGrantExceedsCaller, "")
	if status, v := a.do(http.MethodPatch, "/keys/"+adminID, admin, `{"scopes": "credits:write"}`); status != 400 {
		t.Fatalf("admin granting itself credits:write: %d %v", status, v)
	}
	narrowID := kidOf(t, narrow)
	status, v = a.do(http.MethodPatch, "/keys/"+narrowID, narrow, `{"scopes": "keys:read,keys:write,credits:read"}`)
	wantRefusal(t, "narrow admin widening itself", status, v, CodeGrantExceedsCaller, "")
	member := a.grantKey(ws, store.RoleMember, RoleScopes(store.RoleMember))
	status, v = a.do(http.MethodPatch, "/keys/"+kidOf(t, member), member, `{"role": "owner", "scopes": "all"}`)
	wantRefusal(t, "member raising itself", status, v, CodeMissingScope, "keys:write")
	if role, got := keyGrant(data(a.mustDo(200, http.MethodGet, "/key", member, ""))); role != "member" || !reflect.DeepEqual(got, RoleScopes(store.RoleMember)) {
		t.Fatalf("member after trying to raise itself: %s %v", role, got)
	}

	// A weaker key cannot change or revoke a stronger one; a stronger one can lower it.
	ownerID := kidOf(t, owner)
	status, v = a.do(http.MethodPatch, "/keys/"+ownerID, admin, `{"disabled": true}`)
	wantRefusal(t, "admin disabling the owner", status, v, CodeGrantExceedsCaller, "")
	status, v = a.do(http.MethodDelete, "/keys/"+ownerID, admin, "")
	wantRefusal(t, "admin revoking the owner", status, v, CodeGrantExceedsCaller, "")
	role, got = keyGrant(data(a.mustDo(200, http.MethodPatch, "/keys/"+adminID, owner, `{"role": "member"}`)))
	if role != "member" || !reflect.DeepEqual(got, RoleScopes(store.RoleMember)) {
		t.Fatalf("admin lowered to member: %s %v", role, got)
	}
	// The change is seen at once (the key cache forgets it).
	status, v = a.do(http.MethodGet, "/activity", admin, "")
	if status != 200 {
		t.Fatalf("member reading activity: %d %v", status, v)
	}
	status, v = a.do(http.MethodPost, "/workspaces", admin, `{"name": "x"}`)
	wantRefusal(t, "lowered admin creating a workspace", status, v, CodeMissingScope, "workspaces:write")
}

func withoutDelete(scopes []string) []string {
	return slices.DeleteFunc(slices.Clone(scopes), func(s string) bool { return strings.HasSuffix(s, ":delete") })
}

// A workspace's first management key holds what its creator holds: owner with every scope
// from an owner, and from an admin no credits:write to top up the child's wallet.
func TestCreatedWorkspaceKeyHoldsTheCreatorsGrant(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	ws, _, owner := a.workspace(0)
	for _, tc := range []struct {
		key  string
		role store.Role
	}{{owner, store.RoleOwner}, {a.grantKey(ws, store.RoleAdmin, RoleScopes(store.RoleAdmin)), store.RoleAdmin}} {
		v := data(a.mustDo(201, http.MethodPost, "/workspaces", tc.key, `{"name": "child"}`))
		mk := v["management_key"].(map[string]any)
		role, got := keyGrant(mk)
		if store.Role(role) != tc.role || !reflect.DeepEqual(got, RoleScopes(tc.role)) {
			t.Fatalf("first key of a workspace made by %s: %s %v", tc.role, role, got)
		}
		status, body := a.do(http.MethodPost, "/credits", mk["key"].(string), `{"amount_usd": "5"}`)
		if tc.role == store.RoleAdmin {
			wantRefusal(t, "child of an admin topping up", status, body, CodeMissingScope, "credits:write")
		} else if status != 200 {
			t.Fatalf("child of an owner topping up: %d %v", status, body)
		}
	}
}

// Migration 0012 makes every management key made before it an owner with every scope the
// route table knew, and each migration adding an area grants it to owners (0013:
// notifications); the newest such grant must be every scope of the route table, or owners
// lose the new area.
func TestRoleMigrationGrantsEveryScope(t *testing.T) {
	if !reflect.DeepEqual(storetest.UpgradedOwnerScopes, managementScopes) {
		t.Fatalf("migrations grant %v; the route table's scopes are %v: add a migration granting the new ones to owners", storetest.UpgradedOwnerScopes, managementScopes)
	}
	re := regexp.MustCompile(`UPDATE api_keys SET role = 'owner', scopes = '([^']*)' WHERE kind = 'management'`)
	for _, be := range []string{"sqlite", "postgres"} {
		files, err := filepath.Glob(fmt.Sprintf("../store/%s/migrations/*.sql", be))
		if err != nil || len(files) == 0 {
			t.Fatalf("migrations of %s: %v", be, err)
		}
		slices.Sort(files)
		var newest []string
		var from string
		for _, f := range files {
			sql, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if m := re.FindSubmatch(sql); m != nil {
				newest, from = store.SplitScopes(string(m[1])), filepath.Base(f)
			}
		}
		if !reflect.DeepEqual(newest, managementScopes) {
			t.Fatalf("%s: the newest grant to owners (%s) is %v, not %v", be, from, newest, managementScopes)
		}
	}
}

// stalledCredits is a store whose top-ups never answer until their context ends.
type stalledCredits struct{ store.Store }

func (stalledCredits) AddCredits(ctx context.Context, _ string, _ int64, _ string) (store.Balance, error) {
	<-ctx.Done()
	return store.Balance{}, ctx.Err()
}

// An admin write is bounded by store_timeout like a read, and its 503 says the outcome is
// unknown, so that a client looks before retrying a top-up.
func TestAdminWriteBoundedByStoreTimeout(t *testing.T) {
	a := newAdminGateway(t, nil, func(g *Gateway) { g.StoreTimeout = 100 * time.Millisecond })
	_, _, owner := a.workspace(0)
	a.g.Store = stalledCredits{a.g.Store}
	start := time.Now()
	status, v := a.do(http.MethodPost, "/credits", owner, `{"amount_usd": "1"}`)
	if e, _ := v["error"].(map[string]any); status != http.StatusServiceUnavailable || e["code"] != CodeStoreUnavailable || v["outcome_unknown"] != true ||
		!strings.Contains(v["message"].(string), "may or may not") {
		t.Fatalf("stalled top-up: %d %v", status, v)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("stalled top-up answered after %v", d)
	}
}
