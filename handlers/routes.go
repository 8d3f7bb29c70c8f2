package handlers

import (
	"net/http"
	"sort"
	"strings"
)

// pathAliases are the route names of the specification's earlier listing (Versioning):
// each answers exactly as its current counterpart, whatever that is when Init runs.
// GET /generation is in the base table; include_endpoints on GET /models is handled there.
var pathAliases = map[string]string{
	"/moderation": "/moderations",
}

// placeholderRoutes are routes the specification names whose family is not built yet.
// Until a route set claims them they answer 501 not_implemented_yet, so that clients get
// a precise answer rather than 404, and their aliases are wired already.
var placeholderRoutes = map[string][]string{
	"/moderations": {http.MethodPost},
}

// routePattern is a route whose path has {parameter} segments, such as /keys/{id}.
type routePattern struct {
	path     string
	segments []string
	methods  map[string]endpoint
}

// finishRoutes completes the route table once every route set is in: placeholders where
// nothing else answers, then aliases, then the parameterised paths move to g.patterns.
func (g *Gateway) finishRoutes() {
	g.placeholders = map[string]bool{}
	for path, methods := range placeholderRoutes {
		for _, m := range methods {
			if _, ok := g.routes[path][m]; ok {
				continue
			}
			if g.routes[path] == nil {
				g.routes[path] = map[string]endpoint{}
			}
			g.routes[path][m] = endpoint{authStandard, SurfaceOpenAI, notImplemented(m + " " + path)}
			g.placeholders[m+" "+path] = true
		}
	}
	for alias, target := range pathAliases {
		if methods, ok := g.routes[target]; ok {
			if _, taken := g.routes[alias]; !taken {
				g.routes[alias] = methods
			}
		}
	}
	g.patterns = g.patterns[:0]
	for path, methods := range g.routes {
		if !strings.Contains(path, "{") {
			continue
		}
		g.patterns = append(g.patterns, routePattern{path: path, segments: strings.Split(path, "/"), methods: methods})
		// A literal request for "/keys/{id}" must not reach the handler without its parameter.
		delete(g.routes, path)
	}
	sort.Slice(g.patterns, func(i, j int) bool { return g.patterns[i].path < g.patterns[j].path })
}

// matchPattern finds the parameterised route of path and sets its parameters as the
// request's path values (r.PathValue("id")). A parameter matches one non-empty segment.
func (g *Gateway) matchPattern(r *http.Request, path string) (map[string]endpoint, bool) {
	if len(g.patterns) == 0 {
		return nil, false
	}
	segs := strings.Split(path, "/")
	for _, p := range g.patterns {
		if len(p.segments) != len(segs) || !p.matches(segs) {
			continue
		}
		for i, s := range p.segments {
			if isParam(s) {
				r.SetPathValue(s[1:len(s)-1], segs[i])
			}
		}
		return p.methods, true
	}
	return nil, false
}

func (p routePattern) matches(segs []string) bool {
	for i, s := range p.segments {
		if isParam(s) {
			if segs[i] == "" {
				return false
			}
		} else if s != segs[i] {
			return false
		}
	}
	return true
}

func isParam(seg string) bool { return len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' }

// notImplemented answers a route the specification reserves but this gateway does not serve yet.
func notImplemented(route string) func(w http.ResponseWriter, r *http.Request, c *Caller) error {
	return func(w http.ResponseWriter, r *http.Request, c *Caller) error {
		return newError(http.StatusNotImplemented, CodeNotImplemented, route+" is not implemented yet by this gateway")
	}
}
