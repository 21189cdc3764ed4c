package sim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server is a simulator listening for plaintext HTTP/1.1 and HTTP/2 (h2c),
// so gRPC clients reach it with a plain http:// URL.
type Server struct {
	ln  net.Listener
	srv *http.Server
	err chan error
}

// Listen serves h on addr ("127.0.0.1:0" picks a free port) until Close.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s := &Server{
		ln:  ln,
		srv: &http.Server{Handler: h, Protocols: &p, ReadHeaderTimeout: 10 * time.Second},
		err: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err <- err
	}()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the server's base URL, http://host:port.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops the server, waiting until ctx is done for in-flight calls and
// then closing every connection. It returns the serving error, if any.
func (s *Server) Close(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	return <-s.err
}
