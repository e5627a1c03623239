"""Writers: every output popliner produces is rendered here, from plain values the library returns."""
