package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CookieName is the console's login cookie (HttpOnly, SameSite=Strict, Path=/ui).
const CookieName = "sandpit_console"

// csrfField is the form field (and X-CSRF-Token the header) that carries a page's CSRF token.
const csrfField = "csrf"

// authenticator signs logins and CSRF tokens with a key made when the daemon starts (a
// restart signs everyone out).
type authenticator struct {
	tokenSum [sha256.Size]byte
	hasToken bool
	key      []byte
	now      func() time.Time
}

func newAuthenticator(token string, now func() time.Time) (*authenticator, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making the console's signing key: %w", err)
	}
	return &authenticator{tokenSum: sha256.Sum256([]byte(token)), hasToken: token != "", key: key, now: now}, nil
}

func (a *authenticator) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// tokenMatches compares a presented token with the daemon's in constant time (digests of
// equal length: the time says nothing of the token's length).
func (a *authenticator) tokenMatches(given string) bool {
	got := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(got[:], a.tokenSum[:]) == 1
}

// newLogin returns a login cookie's value: its expiry (Unix seconds) and its signature.
func (a *authenticator) newLogin() string {
	exp := strconv.FormatInt(a.now().Add(LoginTTL).Unix(), 10)
	return exp + "." + a.mac("login", exp)
}

// validLogin says whether v is a login this daemon signed that has not expired.
func (a *authenticator) validLogin(v string) bool {
	exp, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || a.now().Unix() >= n {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(a.mac("login", exp)))
}

// identity is who a request is: "bearer" (the API's Authorization header), a login cookie's
// value, "anonymous" when the daemon has no token, or "" when not signed in.
func (a *authenticator) identity(r *http.Request) string {
	if !a.hasToken {
		return "anonymous"
	}
	if scheme, given, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && a.tokenMatches(strings.TrimSpace(given)) {
		return "bearer"
	}
	if c, err := r.Cookie(CookieName); err == nil && a.validLogin(c.Value) {
		return c.Value
	}
	return ""
}

// csrfToken is the CSRF token of the pages served to identity.
func (a *authenticator) csrfToken(identity string) string { return a.mac("csrf", identity) }

// sameOrigin says whether r comes from a page of the console's own origin: its Origin header
// names the request's own host and port (over http or https: a proxy in front may end TLS),
// or (without Origin) Sec-Fetch-Site says same-origin. A request with neither is refused:
// every browser sends Origin with a POST.
func sameOrigin(r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host) && u.Path == "" && u.User == nil
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// signedIn serves fn to a signed-in request; a GET that is not is sent to the sign-in page,
// anything else answered 401. A POST must also be same-origin and carry the page's CSRF token
// (in the form field csrf or the header X-CSRF-Token), unless it holds the bearer token.
func (c *Console) signedIn(fn func(w http.ResponseWriter, r *http.Request, l login)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := c.auth.identity(r)
		if id == "" {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.errorPage(w, r, http.StatusUnauthorized, "Sign in first: this sandpit daemon requires its token.")
			return
		}
		l := login{identity: id, csrf: c.auth.csrfToken(id), tokenRequired: c.auth.hasToken}
		if r.Method == http.MethodPost && id != "bearer" {
			if !sameOrigin(r) {
				c.errorPage(w, r, http.StatusForbidden, "This action must come from a console page of this daemon (its Origin did not match).")
				return
			}
			given := r.Header.Get("X-CSRF-Token")
			if given == "" {
				r.Body = http.MaxBytesReader(w, r.Body, c.formLimit())
				given = r.PostFormValue(csrfField)
			}
			if !hmac.Equal([]byte(given), []byte(l.csrf)) {
				c.errorPage(w, r, http.StatusForbidden, "This form is stale or did not come from the console (its CSRF token is missing or wrong): reload the page and try again.")
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		fn(w, r, l)
	}
}

// maxFormBytes bounds the sign-in form's body.
const maxFormBytes = 64 << 10

// formLimit bounds a console form's body: the run form carries an input of up to the daemon's
// max_input_bytes, URL-encoded (up to three bytes each).
func (c *Console) formLimit() int64 {
	return 3*int64(c.cfg.Engine.Config().MaxInputBytes) + maxFormBytes
}

// login is the signed-in request's identity and its pages' CSRF token.
type login struct {
	identity      string
	csrf          string
	tokenRequired bool
}

// safeNext returns next when it is a console path, else /ui/ (no open redirect).
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return "/ui/"
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if c.auth.identity(r) != "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: map[string]string{"Next": next}})
}

// submitLogin checks the token of the sign-in form and sets the login cookie.
func (c *Console) submitLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !sameOrigin(r) {
		c.errorPage(w, r, http.StatusForbidden, "Sign in from this daemon's own sign-in page (the request's Origin did not match).")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	next := safeNext(r.PostFormValue("next"))
	if !c.auth.hasToken {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !c.auth.tokenMatches(r.PostFormValue("token")) {
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in",
			Data: map[string]string{"Next": next, "Error": "That is not this daemon's token (its token setting, SANDPIT_TOKEN)."}})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: c.auth.newLogin(), Path: "/ui", MaxAge: int(LoginTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, l login) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
