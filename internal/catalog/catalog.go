// Package catalog is the gateway's model catalogue: well-known models of the major
// providers with their author organisation, context length, input and output
// modalities, the API surfaces (endpoints) they serve and their list prices.
//
// The catalogue is data, not code: models.json, embedded and versioned ("version" is the
// data's revision, "schema" the file format's). Operators extend or override it with a
// file of the same format (Extend, ExtendFile): an entry whose id is already known
// replaces the fields it sets, any other entry is added.
//
// The catalogue describes models; it does not route or bill. What a request costs is set
// by the gateway's configuration (handlers.Registry); the catalogue's prices are list
// prices for discovery.
package catalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
)

// SchemaVersion is the version of the file format this package reads.
const SchemaVersion = 1

//go:embed models.json
var embedded []byte

// Endpoints are the API surfaces a model can serve, as the `endpoints` filter of the
// discovery routes names them.
var Endpoints = []string{"chat", "embeddings", "moderations", "images", "audio", "video", "ocr", "music"}

// Modalities are the kinds of input and output a model handles.
var Modalities = []string{"text", "image", "audio", "video", "file", "embeddings"}

// Catalog is a validated catalogue. It is read-only once built and safe for concurrent use.
type Catalog struct {
	Schema        int            `json:"schema"`
	Version       string         `json:"version"`
	Organisations []Organisation `json:"organisations"`
	Models        []Model        `json:"models"`

	byName map[string]*Model
	orgs   map[string]*Organisation
}

// Organisation is a model's author.
type Organisation struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	URL  string `json:"url,omitempty"`
}

// Model is one catalogue entry.
type Model struct {
	// ID is "<organisation>/<slug>".
	ID           string `json:"id"`
	Name         string `json:"name,omitempty"`
	Organisation string `json:"organisation,omitempty"`
	Description  string `json:"description,omitempty"`
	// Aliases are other names of the model, such as the provider's own model ids; a
	// configured model is matched to its entry by id or alias.
	Aliases []string `json:"aliases,omitempty"`
	// ReleaseDate is YYYY-MM-DD.
	ReleaseDate string `json:"release_date,omitempty"`
	// ContextLength and MaxOutputTokens are in tokens; 0 means unknown or not applicable.
	ContextLength    int64    `json:"context_length,omitempty"`
	MaxOutputTokens  int64    `json:"max_output_tokens,omitempty"`
	InputModalities  []string `json:"input_modalities,omitempty"`
	OutputModalities []string `json:"output_modalities,omitempty"`
	Endpoints        []string `json:"endpoints,omitempty"`
	Pricing          Pricing  `json:"pricing"`

	prices []Price
}

// Pricing holds list prices as exact decimal USD strings; an empty field is not priced.
type Pricing struct {
	// Input, CachedInput, CacheWrite, Output and Reasoning are per million tokens.
	Input       string `json:"input,omitempty"`
	CachedInput string `json:"cached_input,omitempty"`
	CacheWrite  string `json:"cache_write,omitempty"`
	Output      string `json:"output,omitempty"`
	Reasoning   string `json:"reasoning,omitempty"`
	// Request is per request, Image per generated image, AudioSecond per second of audio,
	// Characters per million characters, Page per page and VideoSecond per second of video.
	Request     string `json:"request,omitempty"`
	Image       string `json:"image,omitempty"`
	AudioSecond string `json:"audio_second,omitempty"`
	Characters  string `json:"characters,omitempty"`
	Page        string `json:"page,omitempty"`
	VideoSecond string `json:"video_second,omitempty"`
}

// Price is one priced dimension of a model, in nanodollars per Unit.
type Price struct {
	// Dimension is the Pricing field's JSON name: input, cached_input, output, image...
	Dimension string
	// Unit is what the price is for: "1M tokens", "request", "image", "second",
	// "1M characters" or "page".
	Unit  string
	Nanos int64
}

func (p *Pricing) fields() []struct {
	dim, unit string
	v         *string
} {
	return []struct {
		dim, unit string
		v         *string
	}{
		{"input", "1M tokens", &p.Input}, {"cached_input", "1M tokens", &p.CachedInput},
		{"cache_write", "1M tokens", &p.CacheWrite}, {"output", "1M tokens", &p.Output},
		{"reasoning", "1M tokens", &p.Reasoning}, {"request", "request", &p.Request},
		{"image", "image", &p.Image}, {"audio_second", "second", &p.AudioSecond},
		{"characters", "1M characters", &p.Characters}, {"page", "page", &p.Page},
		{"video_second", "second", &p.VideoSecond},
	}
}

// Prices lists the model's priced dimensions in a fixed order.
func (m *Model) Prices() []Price { return m.prices }

// TokenPrice is the model's list price as the billing arithmetic reads prices, with the
// defaults the gateway's configuration applies: cached input and cache writes at the
// input price, reasoning at the output price.
func (m *Model) TokenPrice() pricing.Price {
	var p pricing.Price
	set := map[string]bool{}
	for _, pr := range m.prices {
		set[pr.Dimension] = true
		switch pr.Dimension {
		case "input":
			p.Input = pr.Nanos
		case "cached_input":
			p.CachedInput = pr.Nanos
		case "cache_write":
			p.CacheWrite = pr.Nanos
		case "output":
			p.Output = pr.Nanos
		case "reasoning":
			p.Reasoning = pr.Nanos
		case "request":
			p.PerRequest = pr.Nanos
		}
	}
	if !set["cached_input"] {
		p.CachedInput = p.Input
	}
	if !set["cache_write"] {
		p.CacheWrite = p.Input
	}
	if !set["reasoning"] {
		p.Reasoning = p.Output
	}
	return p
}

// HasEndpoint tells whether the model serves the surface.
func (m *Model) HasEndpoint(e string) bool { return slices.Contains(m.Endpoints, e) }

var defaultCatalog = sync.OnceValues(func() (*Catalog, error) { return Parse(embedded) })

// Default returns the embedded catalogue. Its validity is checked by this package's tests,
// so a failure here is a build defect and panics.
func Default() *Catalog {
	c, err := defaultCatalog()
	if err != nil {
		panic("catalog: the embedded models.json is invalid: " + err.Error())
	}
	return c
}

// Parse reads and validates a complete catalogue.
func Parse(data []byte) (*Catalog, error) {
	c, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := c.build(); err != nil {
		return nil, err
	}
	return c, nil
}

func decode(data []byte) (*Catalog, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding catalogue: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decoding catalogue: data after the catalogue object")
	}
	if c.Schema != SchemaVersion {
		return nil, fmt.Errorf("catalogue schema %d is not supported (this gateway reads schema %d)", c.Schema, SchemaVersion)
	}
	if strings.TrimSpace(c.Version) == "" {
		return nil, errors.New("catalogue: version is required")
	}
	return &c, nil
}

// ExtendFile is Extend with the operator's file at path.
func (c *Catalog) ExtendFile(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading catalogue overrides: %w", err)
	}
	out, err := c.Extend(data)
	if err != nil {
		return nil, fmt.Errorf("catalogue overrides %s: %w", path, err)
	}
	return out, nil
}

// Extend returns a new catalogue: c with the organisations and models of the overrides
// file data merged in. An entry whose id c knows replaces the fields it sets (a list
// replaces the whole list, a price replaces that dimension's price); any other entry is
// added and must be complete. The result's version is "<c's version>+<data's version>".
func (c *Catalog) Extend(data []byte) (*Catalog, error) {
	o, err := decode(data)
	if err != nil {
		return nil, err
	}
	out := &Catalog{Schema: c.Schema, Version: c.Version + "+" + o.Version}
	out.Organisations = append([]Organisation(nil), c.Organisations...)
	orgIndex := map[string]int{}
	for i, org := range out.Organisations {
		orgIndex[org.ID] = i
	}
	for _, org := range o.Organisations {
		i, ok := orgIndex[org.ID]
		if !ok {
			orgIndex[org.ID] = len(out.Organisations)
			out.Organisations = append(out.Organisations, org)
			continue
		}
		have := &out.Organisations[i]
		if org.Name != "" {
			have.Name = org.Name
		}
		if org.URL != "" {
			have.URL = org.URL
		}
	}
	out.Models = make([]Model, len(c.Models))
	modelIndex := map[string]int{}
	for i, m := range c.Models {
		m.prices = nil
		out.Models[i] = m
		modelIndex[m.ID] = i
	}
	for _, m := range o.Models {
		i, ok := modelIndex[m.ID]
		if !ok {
			modelIndex[m.ID] = len(out.Models)
			out.Models = append(out.Models, m)
			continue
		}
		mergeModel(&out.Models[i], m)
	}
	if err := out.build(); err != nil {
		return nil, err
	}
	return out, nil
}

func mergeModel(dst *Model, src Model) {
	for _, f := range []struct{ dst, src *string }{
		{&dst.Name, &src.Name}, {&dst.Organisation, &src.Organisation}, {&dst.Description, &src.Description},
		{&dst.ReleaseDate, &src.ReleaseDate},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	// A list that is present, even empty, replaces the list.
	for _, f := range []struct{ dst, src *[]string }{
		{&dst.Aliases, &src.Aliases}, {&dst.InputModalities, &src.InputModalities},
		{&dst.OutputModalities, &src.OutputModalities}, {&dst.Endpoints, &src.Endpoints},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if src.ContextLength != 0 {
		dst.ContextLength = src.ContextLength
	}
	if src.MaxOutputTokens != 0 {
		dst.MaxOutputTokens = src.MaxOutputTokens
	}
	dstFields, srcFields := dst.Pricing.fields(), src.Pricing.fields()
	for i := range dstFields {
		if *srcFields[i].v != "" {
			*dstFields[i].v = *srcFields[i].v
		}
	}
}

var (
	orgIDPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	datePattern   = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	knownEndpoint = setOf(Endpoints)
	knownModality = setOf(Modalities)
)

func setOf(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

// build validates the catalogue, parses its prices and indexes it. Models and
// organisations are kept sorted by id, the order the discovery lists page in.
func (c *Catalog) build() error {
	sort.SliceStable(c.Models, func(i, j int) bool { return c.Models[i].ID < c.Models[j].ID })
	sort.SliceStable(c.Organisations, func(i, j int) bool { return c.Organisations[i].ID < c.Organisations[j].ID })
	var errs []error
	c.orgs = make(map[string]*Organisation, len(c.Organisations))
	for i := range c.Organisations {
		org := &c.Organisations[i]
		switch {
		case !orgIDPattern.MatchString(org.ID):
			errs = append(errs, fmt.Errorf("organisation %q: id must be lowercase letters, digits, '.', '_' or '-'", org.ID))
		case c.orgs[org.ID] != nil:
			errs = append(errs, fmt.Errorf("organisation %q is listed twice", org.ID))
		case strings.TrimSpace(org.Name) == "":
			errs = append(errs, fmt.Errorf("organisation %q: name is required", org.ID))
		default:
			c.orgs[org.ID] = org
		}
	}
	c.byName = make(map[string]*Model, len(c.Models)*3)
	for i := range c.Models {
		m := &c.Models[i]
		if err := c.validateModel(m); err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", m.ID, err))
			continue
		}
		for _, name := range append([]string{m.ID}, m.Aliases...) {
			if other := c.byName[name]; other != nil {
				errs = append(errs, fmt.Errorf("model %q: name %q already names model %q", m.ID, name, other.ID))
				continue
			}
			c.byName[name] = m
		}
	}
	return errors.Join(errs...)
}

func (c *Catalog) validateModel(m *Model) error {
	org, slug, ok := strings.Cut(m.ID, "/")
	switch {
	case !ok || org == "" || slug == "" || strings.TrimSpace(m.ID) != m.ID:
		return errors.New(`id must be "<organisation>/<slug>"`)
	case m.Organisation == "":
		m.Organisation = org
	}
	if c.orgs[m.Organisation] == nil {
		return fmt.Errorf("organisation %q is not in the catalogue", m.Organisation)
	}
	if m.Name == "" {
		m.Name = slug
	}
	if m.ReleaseDate != "" {
		if _, err := time.Parse(time.DateOnly, m.ReleaseDate); err != nil || !datePattern.MatchString(m.ReleaseDate) {
			return fmt.Errorf("release_date %q is not YYYY-MM-DD", m.ReleaseDate)
		}
	}
	if m.ContextLength < 0 || m.MaxOutputTokens < 0 {
		return errors.New("context_length and max_output_tokens must not be negative")
	}
	for _, a := range m.Aliases {
		if strings.TrimSpace(a) == "" || strings.TrimSpace(a) != a {
			return fmt.Errorf("alias %q is empty or has surrounding spaces", a)
		}
	}
	for _, list := range []struct {
		name  string
		vals  []string
		known map[string]bool
		all   []string
	}{
		{"input_modalities", m.InputModalities, knownModality, Modalities},
		{"output_modalities", m.OutputModalities, knownModality, Modalities},
		{"endpoints", m.Endpoints, knownEndpoint, Endpoints},
	} {
		if len(list.vals) == 0 {
			return fmt.Errorf("%s must list at least one of %s", list.name, strings.Join(list.all, ", "))
		}
		for _, v := range list.vals {
			if !list.known[v] {
				return fmt.Errorf("%s: unknown value %q (want %s)", list.name, v, strings.Join(list.all, ", "))
			}
		}
	}
	m.prices = nil
	for _, f := range m.Pricing.fields() {
		if *f.v == "" {
			continue
		}
		n, err := pricing.ParseUSD(*f.v)
		if err != nil {
			return fmt.Errorf("pricing %s: %w", f.dim, err)
		}
		m.prices = append(m.prices, Price{Dimension: f.dim, Unit: f.unit, Nanos: n})
	}
	return nil
}

// Lookup finds a model by its id or one of its aliases.
func (c *Catalog) Lookup(name string) (*Model, bool) {
	m, ok := c.byName[name]
	return m, ok
}

// Organisation finds an organisation by id.
func (c *Catalog) Organisation(id string) (*Organisation, bool) {
	o, ok := c.orgs[id]
	return o, ok
}
