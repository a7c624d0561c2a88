package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's ports on its page: what listens (GET …/ports through the API) and its share
// links (…/shares), each port with a button that makes a link for a person's browser. The
// link's secret is shown once, in the answer to the button's POST, never in a URL of the
// console's own.

// portRow is a port the session listens on; Path is its path form on the daemon
// (/v1/agents/{agent}/sessions/{id}/ports/{port}/), which the page links to.
type portRow struct {
	Port    int    `json:"port"`
	Address string `json:"address"`
	Path    string `json:"-"`
}

// shareRow is a share of one of the session's ports; URL is set only just after it is made.
type shareRow struct {
	ID        string
	Port      int
	ExpiresAt time.Time
	URL       string
}

// portsView is the page's ports part.
type portsView struct {
	// Listed says the ports were read (the session is active); Note why they were not.
	Listed      bool
	Note, Error string
	Ports       []portRow
	Shares      []shareRow
	SharesError string
	// Shared is the share just made (with its URL), ShareError why one was not.
	Shared     *shareRow
	ShareError string
	// SharesURL is where the share button posts.
	SharesURL string
	// Token says the daemon has a token: a browser, which cannot send it, opens a port by a
	// share link, not by its path.
	Token bool
}

// sessionAPI is the REST path of agent's session id.
func sessionAPI(agent, id string) string {
	return "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(id)
}

// sessionPorts fills v's ports part: the ports while the session is active, and its shares.
func (c *Console) sessionPorts(r *http.Request, v *portsView, info sandbox.SessionInfo) {
	v.SharesURL = SessionURL(info.Agent, info.ID) + "/shares"
	v.Token = c.cfg.Token != ""
	api := sessionAPI(info.Agent, info.ID)
	if info.State == sandbox.SessionActive {
		status, body, err := c.callAPI(r, http.MethodGet, api+"/ports", nil, 1<<20)
		var list struct {
			Ports []portRow `json:"ports"`
		}
		switch {
		case err != nil:
			v.Error = err.Error()
		case status != http.StatusOK:
			v.Error = "Listing the ports failed: " + apiMessage(status, body)
		case json.Unmarshal(body, &list) != nil:
			v.Error = "The API's list of ports is not JSON."
		default:
			v.Listed, v.Ports = true, list.Ports
			for i := range v.Ports {
				v.Ports[i].Path = api + "/ports/" + strconv.Itoa(v.Ports[i].Port) + "/"
			}
		}
	} else {
		v.Note = "The ports are listed while the session is active; it is " + info.State + "."
	}
	status, body, err := c.callAPI(r, http.MethodGet, api+"/shares", nil, 1<<20)
	var shares apitype.ShareList
	switch {
	case err != nil:
		v.SharesError = err.Error()
	case status == http.StatusNotFound:
		v.SharesURL = "" // this daemon keeps no shares: the page offers none
	case status != http.StatusOK:
		v.SharesError = "Listing the shares failed: " + apiMessage(status, body)
	case json.Unmarshal(body, &shares) != nil:
		v.SharesError = "The API's list of shares is not JSON."
	}
	for _, s := range shares.Shares {
		v.Shares = append(v.Shares, shareRow{ID: s.ID, Port: s.Port, ExpiresAt: s.ExpiresAt})
	}
}

// createShare makes a share link of the form's port (through the API) and shows the session's
// page with it.
func (c *Console) createShare(w http.ResponseWriter, r *http.Request, l login) {
	agent, id, info, ok := c.session(w, r)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PostFormValue("port"))
	status := http.StatusCreated
	var shared *shareRow
	problem := ""
	if err != nil {
		status, problem = http.StatusBadRequest, "Give the port to share as a number."
	} else {
		raw, _ := json.Marshal(apitype.ShareRequest{Port: port})
		var body []byte
		status, body, err = c.callAPI(r, http.MethodPost, sessionAPI(agent, id)+"/shares", raw, 1<<20)
		var sh apitype.Share
		switch {
		case err != nil:
			status, problem = http.StatusBadGateway, err.Error()
		case status != http.StatusCreated:
			problem = "The port could not be shared: " + apiMessage(status, body)
		case json.Unmarshal(body, &sh) != nil || sh.URL == "":
			status, problem = http.StatusBadGateway, "The API's answer has no share link."
		default:
			shared = &shareRow{ID: sh.ID, Port: sh.Port, ExpiresAt: sh.ExpiresAt, URL: sh.URL}
		}
	}
	v := c.sessionView(r, agent, id, info)
	v.Ports.Shared, v.Ports.ShareError = shared, problem
	c.render(w, r, status, "session", l.page("Session "+id, "sessions", v))
}

// revokeShare revokes a share (through the API) and goes back to the session's page.
func (c *Console) revokeShare(w http.ResponseWriter, r *http.Request, l login) {
	agent, id, _, ok := c.session(w, r)
	if !ok {
		return
	}
	status, body, err := c.callAPI(r, http.MethodDelete, sessionAPI(agent, id)+"/shares/"+url.PathEscape(r.PathValue("share")), nil, 1<<20)
	if err != nil || status != http.StatusNoContent {
		msg := ""
		if err != nil {
			status, msg = http.StatusBadGateway, err.Error()
		} else {
			msg = apiMessage(status, body)
		}
		c.errorPage(w, r, status, "The share could not be revoked: "+msg)
		return
	}
	http.Redirect(w, r, SessionURL(agent, id)+"#ports", http.StatusSeeOther)
}
