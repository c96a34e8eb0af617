package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/sentinel-coordination/sentinel"
)

type electionsData struct {
	Namespace string
	Group     string
	Groups    []electionRow // without a group: every group (of Namespace, else of every namespace)
	Leader    *sentinel.Leader
	NoLeader  bool
	Members   []sentinel.Member
	Error     string
}

type electionRow struct {
	sentinel.Election
	Link string
}

// elections lists the election groups (every namespace unless one is
// asked for), each with its leader and live members; with a group, it
// shows that group's leader (read from its lease row: term, since, expiry)
// and its members.
func (cs *Console) elections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := electionsData{Namespace: q.Get("ns"), Group: q.Get("group")}
	status := http.StatusOK
	if d.Group == "" {
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		es, err := cs.c.Elections(ctx, sentinel.ElectionFilter{Namespace: d.Namespace, AllNamespaces: d.Namespace == ""})
		if err != nil {
			d.Error, status = err.Error(), errStatus(err)
		}
		for _, e := range es {
			d.Groups = append(d.Groups, electionRow{Election: e, Link: "elections?" + url.Values{"ns": {e.Namespace}, "group": {e.Group}}.Encode()})
		}
	}
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
	cs.render(w, r, status, "elections.html", page{Nav: "elections", Data: d})
}
