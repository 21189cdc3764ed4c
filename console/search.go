package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// pageError is a page's own answer, not the API's: a name that matches
// nothing (404) or a reference that cannot name anything (400).
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &pageError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

func badRef(format string, args ...any) error {
	return &pageError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// maxRef is the longest name or ID a URL may carry (the API's own name
// limit is 256 bytes).
const maxRef = 256

// checkRef refuses a reference no rack, component or rollout could be
// named: empty, too long, not UTF-8 or with control characters.
func checkRef(kind, ref string) error {
	switch {
	case strings.TrimSpace(ref) == "":
		return badRef("no %s named: the URL needs a %s's name or ID", kind, kind)
	case len(ref) > maxRef:
		return badRef("%q… is not a %s's name or ID: longer than %d bytes", ref[:32], kind, maxRef)
	case !utf8.ValidString(ref):
		return badRef("%q is not a %s's name or ID: not UTF-8", ref, kind)
	case strings.IndexFunc(ref, unicode.IsControl) >= 0:
		return badRef("%q is not a %s's name or ID: it has control characters", ref, kind)
	}
	return nil
}

// resolveRack returns the ID of the rack ref names: its ID, else its name,
// else its serial number. An ID is passed on as it is (the API says
// whether it exists); a name or serial that matches no live rack is a 404
// naming it.
func (c *Console) resolveRack(ctx context.Context, ref string) (string, error) {
	if id, err := uuid.Parse(ref); err == nil {
		return id.String(), nil
	}
	if err := checkRef("rack", ref); err != nil {
		return "", err
	}
	var id string
	err := c.pool.QueryRow(ctx, `SELECT id::text FROM rack WHERE deleted_at IS NULL AND (name = $1 OR serial_number = $1)
		ORDER BY name = $1 DESC, name, id LIMIT 1`, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound("no rack is named %q (nor has that serial number)", ref)
	} else if err != nil {
		return "", fmt.Errorf("find rack %q: %w", ref, err)
	}
	return id, nil
}

// resolveRun returns the ID of the rollout ref names: its ID, else its
// name (names need not be unique: the newest run of that name).
func (c *Console) resolveRun(ctx context.Context, ref string) (string, error) {
	if id, err := uuid.Parse(ref); err == nil {
		return id.String(), nil
	}
	if err := checkRef("rollout", ref); err != nil {
		return "", err
	}
	var id string
	err := c.pool.QueryRow(ctx, `SELECT id::text FROM operation_run WHERE name = $1 ORDER BY created_at DESC, id DESC LIMIT 1`, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound("no rollout is named %q", ref)
	} else if err != nil {
		return "", fmt.Errorf("find rollout %q: %w", ref, err)
	}
	return id, nil
}

// taskPrefix is what may start a task ID: hexadecimal digits and dashes.
var taskPrefix = regexp.MustCompile(`^[0-9a-fA-F-]+$`)

// minTaskPrefix is the shortest prefix of a task ID a URL may give.
const minTaskPrefix = 4

// resolveTask returns the ID of the task ref names: its ID, or a prefix of
// it (at least 4 hex digits, as the pages show 8) that only one task's ID
// starts with. Tasks have no names: anything but hex digits and dashes is
// a 400.
func (c *Console) resolveTask(ctx context.Context, ref string) (string, error) {
	if id, err := uuid.Parse(ref); err == nil {
		return id.String(), nil
	}
	if !taskPrefix.MatchString(ref) || len(ref) > 36 {
		if len(ref) > 64 {
			ref = ref[:64] + "…"
		}
		return "", badRef("%q is not a task ID: a task is named by its ID (hex digits and dashes) or the first %d or more of them", ref, minTaskPrefix)
	}
	if len(strings.ReplaceAll(ref, "-", "")) < minTaskPrefix {
		return "", badRef("%q is too short a task ID prefix: give at least %d hex digits", ref, minTaskPrefix)
	}
	ids, err := c.taskIDsWithPrefix(ctx, ref, 2)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", notFound("no task's ID starts with %q", ref)
	case 1:
		return ids[0], nil
	}
	return "", notFound("more than one task's ID starts with %q: give more of it, or search for it", ref)
}

// taskIDsWithPrefix returns up to limit IDs of tasks that start with
// prefix, newest first.
func (c *Console) taskIDsWithPrefix(ctx context.Context, prefix string, limit int) ([]string, error) {
	lo, hi := idRange(prefix)
	rows, err := c.pool.Query(ctx, `SELECT id::text FROM task WHERE id BETWEEN $1 AND $2 ORDER BY created_at DESC, id DESC LIMIT $3`, lo, hi, limit)
	if err != nil {
		return nil, fmt.Errorf("find task %q: %w", prefix, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// idRange returns the lowest and highest UUIDs that start with prefix
// (hex digits; dashes are ignored), so that a prefix is a range of the
// primary key's index, not a scan of every ID as text.
func idRange(prefix string) (lo, hi string) {
	p := strings.ToLower(strings.ReplaceAll(prefix, "-", ""))
	if len(p) > 32 {
		p = p[:32]
	}
	dash := func(h string) string { return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] }
	return dash(p + strings.Repeat("0", 32-len(p))), dash(p + strings.Repeat("f", 32-len(p)))
}

// ComponentHit is one component a search or a component URL found, with
// its rack.
type ComponentHit struct {
	ID, Name, Type, Serial, RackID, RackName string
	MACs                                     string
}

// resolveComponent returns the component ref names: its ID, name, serial
// number or BMC MAC address (any case, colons or dashes).
func (c *Console) resolveComponent(ctx context.Context, ref string) (ComponentHit, error) {
	if err := checkRef("component", ref); err != nil {
		return ComponentHit{}, err
	}
	var h ComponentHit
	err := c.pool.QueryRow(ctx, `
		SELECT c.id::text, c.name, c.type, c.serial_number, coalesce(c.rack_id::text, ''), coalesce(r.name, '')
		FROM component c LEFT JOIN rack r ON r.id = c.rack_id
		WHERE c.deleted_at IS NULL AND (c.id::text = lower($1) OR c.name = $1 OR c.serial_number = $1
		  OR c.id IN (SELECT component_id FROM bmc WHERE mac_address = $2))
		ORDER BY c.id::text = lower($1) DESC, c.name = $1 DESC, c.name, c.id LIMIT 1`, ref, normalMAC(ref)).
		Scan(&h.ID, &h.Name, &h.Type, &h.Serial, &h.RackID, &h.RackName)
	if errors.Is(err, pgx.ErrNoRows) {
		return ComponentHit{}, notFound("no component is named %q (nor has that ID, serial number or BMC MAC address)", ref)
	} else if err != nil {
		return ComponentHit{}, fmt.Errorf("find component %q: %w", ref, err)
	}
	return h, nil
}

// normalMAC writes s as the inventory stores MAC addresses (lowercase,
// colons), or returns "" when s is not one.
func normalMAC(s string) string {
	m := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", ":"))
	if len(m) == 12 && !strings.Contains(m, ":") {
		var b strings.Builder
		for i := 0; i < 12; i += 2 {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(m[i : i+2])
		}
		m = b.String()
	}
	if !macRE.MatchString(m) {
		return ""
	}
	return m
}

var macRE = regexp.MustCompile(`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`)

// component serves /ui/components/{ref}: a component has no page of its
// own, so it is its rack's page, at its row.
func (c *Console) component(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r.Context())
	h, err := c.resolveComponent(r.Context(), r.PathValue("ref"))
	if err != nil {
		c.fail(w, r, u, statusOf(err), err)
		return
	}
	if h.RackID == "" {
		c.fail(w, r, u, http.StatusNotFound, notFound("component %s (%s) is in no rack", h.Name, h.ID))
		return
	}
	http.Redirect(w, r, Prefix+"racks/"+h.RackID+"#c-"+h.ID, http.StatusSeeOther)
}

// searchLimit is how many results of each kind a search shows.
const searchLimit = 50

// searchData is the search page: what was asked and what matched, each
// kind cut to searchLimit (More says there were more).
type searchData struct {
	Q          string
	Racks      []rackHit
	Components []ComponentHit
	Tasks      []taskHit
	Rollouts   []runHit
	More       map[string]bool
	Note       string
}

// Results counts the results shown.
func (d searchData) Results() int {
	return len(d.Racks) + len(d.Components) + len(d.Tasks) + len(d.Rollouts)
}

type rackHit struct{ ID, Name, Serial, Room, Position, Why string }

type taskHit struct {
	ID, RackID, RackName, Operation, Status, Error string
}

type runHit struct{ ID, Name, Status string }

// likePattern is q for LIKE, its wildcards escaped, matching anywhere.
func likePattern(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(q) + "%"
}

// search serves /ui/search?q=TEXT: racks by name or serial number,
// components by name, serial number or BMC MAC address, tasks by ID
// prefix, rollouts by name, each kind at most searchLimit, as links.
// These are read-only queries for any identity with a role, like the
// overview's: the API has no search by serial number or MAC.
func (c *Console) search(r *http.Request) (view, error) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	d := searchData{Q: q, More: map[string]bool{}}
	v := view{"search", "Search", "", nil, &d}
	if q != "" {
		v.title = "Search: " + q
	}
	if q == "" {
		return v, nil
	}
	if len(q) > maxRef || !utf8.ValidString(q) || strings.IndexFunc(q, unicode.IsControl) >= 0 {
		return view{}, badRef("that cannot be searched for: give at most %d bytes of text without control characters", maxRef)
	}
	ctx := r.Context()
	like := likePattern(q)
	var err error
	if d.Racks, err = collect(ctx, c, &d, "racks", `
		SELECT id::text, name, serial_number, location_room, location_position,
		  CASE WHEN name ILIKE $2 THEN 'name' ELSE 'serial number' END
		FROM rack WHERE deleted_at IS NULL AND (name ILIKE $2 OR serial_number ILIKE $2 OR id::text = lower($3))
		ORDER BY name = $3 DESC, name, id LIMIT $1`, func(row pgx.CollectableRow) (rackHit, error) {
		var h rackHit
		err := row.Scan(&h.ID, &h.Name, &h.Serial, &h.Room, &h.Position, &h.Why)
		return h, err
	}, like, q); err != nil {
		return view{}, err
	}
	if d.Components, err = collect(ctx, c, &d, "components", `
		SELECT c.id::text, c.name, c.type, c.serial_number, coalesce(c.rack_id::text, ''), coalesce(r.name, ''),
		  coalesce((SELECT string_agg(b.mac_address, ', ' ORDER BY b.mac_address) FROM bmc b WHERE b.component_id = c.id), '')
		FROM component c LEFT JOIN rack r ON r.id = c.rack_id
		WHERE c.deleted_at IS NULL AND (c.name ILIKE $2 OR c.serial_number ILIKE $2 OR c.id::text = lower($3)
		  OR c.id IN (SELECT component_id FROM bmc WHERE mac_address LIKE $4))
		ORDER BY c.name = $3 DESC, c.name, c.id LIMIT $1`, func(row pgx.CollectableRow) (ComponentHit, error) {
		var h ComponentHit
		err := row.Scan(&h.ID, &h.Name, &h.Type, &h.Serial, &h.RackID, &h.RackName, &h.MACs)
		return h, err
	}, like, q, macLike(q)); err != nil {
		return view{}, err
	}
	if hex := strings.ReplaceAll(q, "-", ""); taskPrefix.MatchString(q) && len(hex) >= minTaskPrefix && len(hex) <= 32 {
		lo, hi := idRange(q)
		if d.Tasks, err = collect(ctx, c, &d, "tasks", `
			SELECT t.id::text, t.rack_id::text, coalesce(r.name, ''), t.operation_type || ' ' || t.operation_code, t.status,
			  CASE WHEN t.status IN ('failed', 'terminated') THEN coalesce(nullif(t.report->>'error', ''), t.message) ELSE '' END
			FROM task t LEFT JOIN rack r ON r.id = t.rack_id
			WHERE t.id BETWEEN $2 AND $3 ORDER BY t.created_at DESC, t.id DESC LIMIT $1`, func(row pgx.CollectableRow) (taskHit, error) {
			var h taskHit
			err := row.Scan(&h.ID, &h.RackID, &h.RackName, &h.Operation, &h.Status, &h.Error)
			return h, err
		}, lo, hi); err != nil {
			return view{}, err
		}
	}
	if d.Rollouts, err = collect(ctx, c, &d, "rollouts", `
		SELECT id::text, name, status FROM operation_run WHERE name ILIKE $2 OR id::text = lower($3)
		ORDER BY name = $3 DESC, created_at DESC, id DESC LIMIT $1`, func(row pgx.CollectableRow) (runHit, error) {
		var h runHit
		err := row.Scan(&h.ID, &h.Name, &h.Status)
		return h, err
	}, like, q); err != nil {
		return view{}, err
	}
	return v, nil
}

// macLike is q as a pattern over stored MAC addresses (a whole or partial
// MAC, with colons or dashes), or one that matches nothing.
func macLike(q string) string {
	m := strings.ToLower(strings.ReplaceAll(q, "-", ":"))
	if len(m) < 5 || strings.Trim(m, "0123456789abcdef:") != "" || !strings.Contains(m, ":") {
		if full := normalMAC(q); full != "" {
			return full
		}
		return "" // no stored MAC is empty
	}
	return "%" + m + "%"
}

// collect runs a search query of kind whose $1 is the limit and whose
// further parameters are args; it reads one more than searchLimit to say
// whether there were more.
func collect[T any](ctx context.Context, c *Console, d *searchData, kind, query string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := c.pool.Query(ctx, query, append([]any{searchLimit + 1}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", kind, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", kind, err)
	}
	if len(out) > searchLimit {
		out = out[:searchLimit]
		d.More[kind] = true
	}
	return out, nil
}
