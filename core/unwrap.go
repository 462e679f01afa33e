package core

// StoreUnwrapper is implemented by a Store that wraps another one, such as an
// instrumenting or logging decorator. Unwrap returns the wrapped store, so
// that StoreAs finds the optional capabilities (see the package
// documentation) the wrapper does not declare itself.
type StoreUnwrapper interface {
	Unwrap() Store
}

// maxUnwrap bounds the walk of StoreAs, so that a wrapper that returns itself
// (or a cycle of wrappers) ends the search instead of spinning forever.
const maxUnwrap = 64

// StoreAs finds the first store in the chain s, s.Unwrap(), s.Unwrap().Unwrap(),
// ... that implements T, in the spirit of errors.As, and returns it as a T. It
// returns false when no store in the chain implements T.
//
// The library looks up every optional capability of a store this way, so a
// wrapper that embeds core.Store and implements Unwrap keeps the capabilities
// of the store it wraps: the dispatcher still batches DONE writes and can
// still delete delivered events. Calls to a capability found this way go to
// the inner store directly; a wrapper that wants to observe them implements
// the capability itself, and is then found first.
func StoreAs[T any](s Store) (T, bool) {
	for range maxUnwrap {
		if s == nil {
			break
		}
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(StoreUnwrapper)
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}
