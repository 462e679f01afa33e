package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// csrfCookie holds a random nonce of the browser; the forms carry its HMAC
// under the console's key (a signed double-submit cookie). Another site can
// make the browser send the cookie but can neither read it nor compute the
// token without the key, and a token lifted from one browser does not match
// another browser's cookie.
const (
	csrfCookie = "outbox_console_csrf"
	csrfField  = "csrf_token"
	nonceBytes = 32
)

// csrfToken returns the token the forms of this response carry, setting
// the nonce cookie first when the browser has none (or a malformed one).
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	nonce, ok := cookieNonce(r)
	if !ok {
		nonce = make([]byte, nonceBytes)
		_, _ = rand.Read(nonce) // never fails (crypto/rand)
		http.SetCookie(w, &http.Cookie{
			Name:     csrfCookie,
			Value:    base64.RawURLEncoding.EncodeToString(nonce),
			Path:     "/",
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteStrictMode,
		})
	}
	return base64.RawURLEncoding.EncodeToString(c.sign(nonce))
}

// checkCSRF reports whether the parsed form of r carries the token of the
// browser's nonce cookie.
func (c *Console) checkCSRF(r *http.Request) bool {
	nonce, ok := cookieNonce(r)
	if !ok {
		return false
	}
	token, err := base64.RawURLEncoding.DecodeString(r.PostForm.Get(csrfField))
	if err != nil {
		return false
	}
	return hmac.Equal(token, c.sign(nonce))
}

func (c *Console) sign(nonce []byte) []byte {
	mac := hmac.New(sha256.New, c.cfg.CSRFKey)
	mac.Write([]byte("outbox console csrf\x00"))
	mac.Write(nonce)
	return mac.Sum(nil)
}

func cookieNonce(r *http.Request) ([]byte, bool) {
	ck, err := r.Cookie(csrfCookie)
	if err != nil {
		return nil, false
	}
	nonce, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil || len(nonce) != nonceBytes {
		return nil, false
	}
	return nonce, true
}
