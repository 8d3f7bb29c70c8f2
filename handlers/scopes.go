package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// A management key holds a role and scopes. A scope is <area>:<read|write|delete>; the areas
// are those the route table's management rows name, so a new area needs no second list. A
// role is both a key's default and its ceiling:
//
//	owner   every scope
//	admin   every scope but credits:write (adding money to the wallet)
//	member  the read scopes
//
// A key never holds more than its creator: a role above the creator's, or a scope the
// creator lacks, is refused with 403 grant_exceeds_caller naming what exceeds.

// Codes of the refusals of scopes and roles (403).
const (
	CodeMissingScope       = "missing_scope"
	CodeRoleRequired       = "role_required"
	CodeGrantExceedsCaller = "grant_exceeds_caller"
)

// scopeAccesses are the accesses of every area, in the order scopes are listed.
var scopeAccesses = []access{accessRead, accessWrite, accessDelete}

// managementScopes is every scope a key may hold: each area of the route table's management
// rows with each access, areas in alphabetical order. Set in init: the route table's handlers
// make keys, which read it, so a variable initialiser would be a cycle.
var managementScopes []string

func init() { managementScopes = scopesOfAreas(routeTable) }

func scopesOfAreas(table []apiRoute) []string {
	var areas []string
	for _, rt := range table {
		if rt.perm.key == managementKey && !slices.Contains(areas, rt.perm.area) {
			areas = append(areas, rt.perm.area)
		}
	}
	slices.Sort(areas)
	var out []string
	for _, a := range areas {
		for _, x := range scopeAccesses {
			out = append(out, a+":"+string(x))
		}
	}
	return out
}

// creditsWrite is the one scope an admin does not hold: topping up the wallet.
const creditsWrite = "credits:write"

// roleRank orders roles: a creator may grant its own role or a lower one.
var roleRank = map[store.Role]int{store.RoleOwner: 3, store.RoleAdmin: 2, store.RoleMember: 1}

// RoleScopes is the role's ceiling and default: the scopes a key of that role holds when
// created without explicit scopes, and the most it may ever hold.
func RoleScopes(role store.Role) []string {
	var out []string
	for _, sc := range managementScopes {
		switch role {
		case store.RoleOwner:
		case store.RoleAdmin:
			if sc == creditsWrite {
				continue
			}
		case store.RoleMember:
			if !strings.HasSuffix(sc, ":"+string(accessRead)) {
				continue
			}
		default:
			continue
		}
		out = append(out, sc)
	}
	return out
}

// ParseRole reads a role; "" is the default role, owner for the operator's CLI.
func ParseRole(s string) (store.Role, error) {
	r := store.Role(strings.ToLower(strings.TrimSpace(s)))
	if !store.ValidRole(r) {
		return "", fmt.Errorf("unknown role %q: want owner, admin or member", s)
	}
	return r, nil
}

// isScopeTemplate tells whether spec names a template rather than explicit scopes.
func isScopeTemplate(spec string) bool {
	switch strings.ToLower(strings.TrimSpace(spec)) {
	case "read", "write", "all":
		return true
	}
	return false
}

// GrantScopes expands what a key is to hold, given its role. spec is "" (the role's
// default), a template (read: every read scope; write: every read and write scope; all:
// every scope), each cut to what the role may hold, or explicit scopes separated by commas
// or spaces ("keys:read,credits:read"), each of which the role must allow. The answer is
// explicit scopes in managementScopes order.
func GrantScopes(role store.Role, spec string) ([]string, error) {
	ceiling := RoleScopes(role)
	spec = strings.TrimSpace(spec)
	var accesses []access
	switch strings.ToLower(spec) {
	case "":
		return ceiling, nil
	case "read":
		accesses = []access{accessRead}
	case "write":
		accesses = []access{accessRead, accessWrite}
	case "all":
		accesses = scopeAccesses
	}
	if accesses != nil {
		var out []string
		for _, sc := range ceiling {
			_, x, _ := strings.Cut(sc, ":")
			if slices.Contains(accesses, access(x)) {
				out = append(out, sc)
			}
		}
		return out, nil
	}
	asked := strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' })
	for _, sc := range asked {
		if !slices.Contains(managementScopes, sc) {
			return nil, fmt.Errorf("unknown scope %q: scopes are read, write, all, or <area>:<read|write|delete> with area one of %s", sc, strings.Join(scopeAreas(), ", "))
		}
		if !slices.Contains(ceiling, sc) {
			return nil, fmt.Errorf("the %s role cannot hold %s", role, sc)
		}
	}
	var out []string
	for _, sc := range managementScopes {
		if slices.Contains(asked, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// scopeAreas lists the areas of managementScopes, for messages.
func scopeAreas() []string {
	var out []string
	for _, sc := range managementScopes {
		a, _, _ := strings.Cut(sc, ":")
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// missingScope is the 403 of a management key without the scope a route needs.
func missingScope(role store.Role, scope string) *APIError {
	e := newError(http.StatusForbidden, CodeMissingScope, fmt.Sprintf("this API key (role %s) lacks the %s scope this endpoint needs; a key holding %s can grant it to a key whose role allows it", role, scope, scope))
	e.Param = "scope"
	e.Extra = map[string]any{"required_scope": scope}
	return e
}

// exceedsCaller checks that the caller holds at least the role and every scope of a grant,
// whether it is a key's new role and scopes or the ones a key the caller would change already
// has: nil, or the 403 naming what exceeds. what says which key the grant is, for the message.
func exceedsCaller(c *Caller, role store.Role, scopes []string, what string) *APIError {
	if role != "" && roleRank[role] > roleRank[c.Key.Role] {
		e := newError(http.StatusForbidden, CodeGrantExceedsCaller, fmt.Sprintf("%s has the %s role, above this API key's %s role", what, role, c.Key.Role))
		e.Param = "role"
		e.Extra = map[string]any{"exceeding_role": string(role)}
		return e
	}
	var extra []string
	for _, sc := range scopes {
		if !slices.Contains(c.Key.Scopes, sc) {
			extra = append(extra, sc)
		}
	}
	if len(extra) > 0 {
		e := newError(http.StatusForbidden, CodeGrantExceedsCaller, fmt.Sprintf("%s holds %s, which this API key does not hold; a key never gets more than its creator", what, strings.Join(extra, ", ")))
		e.Param = "scopes"
		e.Extra = map[string]any{"exceeding_scopes": extra}
		return e
	}
	return nil
}
