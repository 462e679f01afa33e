// Package browsertest drives the web console (package console) in headless
// Chromium with chromedp, on the real databases: it lists dead events,
// replays one and sees it delivered and gone from the list, replays the rest
// after the confirmation page, and takes the screenshots of
// docs/operations.md#web-console; on an ordered store, it skips a blocked
// key's DEAD head after its confirmation page, sees the key's waiting
// events delivered in order, and checks what "replay all" leaves out. It is
// a module of its own so that users of the
// console never download chromedp; it has no code besides its tests.
//
// Environment:
//
//	OUTBOX_CHROMIUM     the browser to run; default chromium (or
//	                    chromium-browser, google-chrome) on PATH. Without
//	                    one the tests skip, naming this variable, or fail
//	                    under OUTBOX_REQUIRE_DBS=1.
//	OUTBOX_SCREENSHOTS  a directory: the SQLite run saves its screenshots
//	                    there as PNG (make screenshots writes docs/images).
package browsertest
