package console

import (
	"errors"
	"net/http"

	"github.com/sentinel-coordination/sentinel"
)

func init() {
	addView(view{path: "elections", label: "Elections", order: 30, handler: func(cs *Console) http.HandlerFunc { return cs.elections }})
}

type electionsData struct {
	Namespace string
	Group     string
	Leader    *sentinel.Leader
	NoLeader  bool
	Members   []sentinel.Member
	Error     string
}

// elections shows a group's leader (read from its lease row: term, since,
// expiry) and its members.
func (cs *Console) elections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := electionsData{Namespace: q.Get("ns"), Group: q.Get("group")}
	status := http.StatusOK
	if d.Group != "" {
		var opts []sentinel.Option
		if d.Namespace != "" {
			opts = append(opts, sentinel.WithNamespace(d.Namespace))
		}
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		l, err := cs.c.Leader(ctx, d.Group, opts...)
		switch {
		case errors.Is(err, sentinel.ErrNoLeader):
			d.NoLeader = true
		case err != nil:
			d.Error, status = err.Error(), errStatus(err)
		default:
			d.Leader = l
		}
		if err == nil || d.NoLeader {
			ms, err := cs.c.Members(ctx, d.Group, opts...)
			if err != nil {
				d.Error, status = err.Error(), errStatus(err)
			}
			d.Members = ms
		}
	}
	cs.render(w, status, "elections.html", page{Nav: "elections", Data: d})
}
