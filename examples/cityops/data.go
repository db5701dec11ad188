package cityops

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

//go:embed data/complaints.json data/procedures.json
var dataFiles embed.FS

// Complaint is one row of the example's complaints table, as
// lookup_complaints returns it. The resident fields are personal data: they
// are in the row because real tables have them, and the manifests' views
// keep them out of every observation.
type Complaint struct {
	// Tenant owns the complaint. Defaults to cityops; the table also holds
	// a few of a neighbouring city's, so tenancy checks have something to
	// refuse.
	Tenant        string `json:"tenant,omitempty"`
	RequestID     string `json:"request_id"`
	Category      string `json:"category"`
	Status        string `json:"status"`
	DaysOpen      int    `json:"days_open"`
	Address       string `json:"address"`
	Summary       string `json:"summary"`
	ResidentName  string `json:"resident_name"`
	ResidentPhone string `json:"resident_phone"`
	ResidentEmail string `json:"resident_email"`
}

// DefaultTenant owns every complaint that names no tenant.
const DefaultTenant = "cityops"

// Complaint statuses.
const (
	StatusOpen       = "open"
	StatusInProgress = "in_progress"
	StatusClosed     = "closed"
)

// Categories are the complaint categories the table knows, which are the
// values lookup_complaints accepts.
var categories = []string{"sanitation", "noise", "pothole", "streetlight", "graffiti"}

var statuses = []string{StatusOpen, StatusInProgress, StatusClosed}

var requestIDPattern = regexp.MustCompile(`^SR-[0-9]{5}$`)

// procedure is one topic of the handbook.
type procedure struct {
	Title string   `json:"title"`
	Steps []string `json:"steps"`
}

// text renders a procedure as the numbered page get_procedure returns.
func (p procedure) text() string {
	var b strings.Builder
	b.WriteString(p.Title)
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "\n%d. %s", i+1, s)
	}
	return b.String()
}

// data is the example's read-only world, decoded once per Register.
type data struct {
	complaints []Complaint
	byID       map[string]Complaint
	procedures map[string]procedure
	topics     []string // sorted
}

func loadData() (*data, error) {
	var c struct {
		Complaints []Complaint `json:"complaints"`
	}
	if err := decodeEmbedded("data/complaints.json", &c); err != nil {
		return nil, err
	}
	var p struct {
		Procedures map[string]procedure `json:"procedures"`
	}
	if err := decodeEmbedded("data/procedures.json", &p); err != nil {
		return nil, err
	}
	d := &data{
		complaints: c.Complaints,
		byID:       make(map[string]Complaint, len(c.Complaints)),
		procedures: p.Procedures,
	}
	for i := range c.Complaints {
		if c.Complaints[i].Tenant == "" {
			c.Complaints[i].Tenant = DefaultTenant
		}
	}
	for _, row := range c.Complaints {
		switch {
		case !requestIDPattern.MatchString(row.RequestID):
			return nil, fmt.Errorf("cityops: complaints: bad request_id %q", row.RequestID)
		case !slices.Contains(categories, row.Category):
			return nil, fmt.Errorf("cityops: complaints: %s: unknown category %q", row.RequestID, row.Category)
		case !slices.Contains(statuses, row.Status):
			return nil, fmt.Errorf("cityops: complaints: %s: unknown status %q", row.RequestID, row.Status)
		case row.DaysOpen < 0:
			return nil, fmt.Errorf("cityops: complaints: %s: negative days_open", row.RequestID)
		}
		if _, dup := d.byID[row.RequestID]; dup {
			return nil, fmt.Errorf("cityops: complaints: duplicate request_id %q", row.RequestID)
		}
		d.byID[row.RequestID] = row
	}
	for topic, proc := range p.Procedures {
		if topic != strings.ToLower(topic) || proc.Title == "" || len(proc.Steps) == 0 {
			return nil, fmt.Errorf("cityops: procedures: topic %q must be lower case with a title and steps", topic)
		}
		d.topics = append(d.topics, topic)
	}
	slices.Sort(d.topics)
	return d, nil
}

func decodeEmbedded(name string, v any) error {
	b, err := dataFiles.ReadFile(name)
	if err != nil {
		return fmt.Errorf("cityops: read %s: %w", name, err)
	}
	if err := decodeStrict(b, v); err != nil {
		return fmt.Errorf("cityops: decode %s: %w", name, err)
	}
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data. Empty input decodes as {} (no arguments at all).
func decodeStrict(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
