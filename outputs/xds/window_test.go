package xds

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestClientsGetTheReceiveWindow: krteds opens its receive window to a client as it connects,
// for each stream (the initial window setting) and for the connection (a window update on stream
// 0): a state-of-the-world ACK of ten thousand names goes in one flight.
func TestClientsGetTheReceiveWindow(t *testing.T) {
	fs := startFake(t)
	conn, err := net.DialTimeout("tcp", fs.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var streamWindow, connWindow uint32
	sawSettings := false
	for !sawSettings || connWindow == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's first frames (settings seen %v, connection window %d): %v", sawSettings, connWindow, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			sawSettings = true
			streamWindow = 65535 // HTTP/2's initial window, unless the settings say otherwise
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				streamWindow = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow = 65535 + f.Increment
			}
		}
	}
	if streamWindow != receiveWindow || connWindow != receiveWindow {
		t.Fatalf("stream window %d, connection window %d; want %d each", streamWindow, connWindow, receiveWindow)
	}
}
