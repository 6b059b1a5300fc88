package common

import (
	"encoding/binary"
	"fmt"

	"github.com/goverbs/goverbs/rpma"
)

// struct hello_t of librpma's examples: enum lang_t (4 bytes) and a
// 1024-byte string.
const (
	HelloStrSize   = 1024
	HelloStrOffset = 4
	HelloSize      = HelloStrOffset + HelloStrSize
)

// The two languages and their greetings.
const (
	LangEN = 0
	LangES = 1
)

var helloStr = [...]string{LangEN: "Hello world!", LangES: "¡Hola Mundo!"}

// WriteHello writes the greeting of lang into the hello_t at b.
func WriteHello(b []byte, lang uint32) {
	binary.LittleEndian.PutUint32(b, lang)
	PutCString(b[HelloStrOffset:HelloSize], helloStr[lang])
}

// Translate switches the hello_t at b to the other language.
func Translate(b []byte) {
	WriteHello(b, (binary.LittleEndian.Uint32(b)+1)%uint32(len(helloStr)))
}

// HelloString returns the string of the hello_t at b.
func HelloString(b []byte) string { return CString(b[HelloStrOffset:HelloSize]) }

// Signature marks initialised persistent memory (SIGNATURE_STR with its NUL).
const Signature = "RPMA_EXAMPLE_SIG\x00"

// Mem is memory for an example: a file mapping (persistent) or DRAM.
type Mem struct {
	Buf        []byte
	DataOffset int  // where the user data starts
	IsPmem     bool // a file mapping
	m          *rpma.Mapping
}

// MapWithSignature maps path with room for size bytes of data after the
// signature; memory without the signature is initialised with init (or an
// empty string) and signed (common_pmem_map_file_with_signature_check).
// With path "" it returns size bytes of DRAM.
func MapWithSignature(path string, size int, init func([]byte)) (*Mem, error) {
	if path == "" {
		return &Mem{Buf: make([]byte, size)}, nil
	}
	off := len(Signature)
	m, err := rpma.MapFile(path, off+size)
	if err != nil {
		return nil, err
	}
	mem := &Mem{Buf: m.Bytes(), DataOffset: off, IsPmem: true, m: m}
	if string(mem.Buf[:off]) != Signature {
		if init != nil {
			init(mem.Buf[off:])
		} else {
			mem.Buf[off] = 0
		}
		copy(mem.Buf, Signature)
	}
	return mem, nil
}

// Close unmaps a file mapping.
func (m *Mem) Close() error {
	if m.m != nil {
		return m.m.Close()
	}
	return nil
}

// InitHello initialises a hello_t in English.
func InitHello(b []byte) { WriteHello(b, LangEN) }

// GPSPM messages (GPSPM_flush.proto): protobuf, three fixed64 fields for a
// request, one for a response.
type FlushRequest struct{ Offset, Length, OpContext uint64 }

// Encode packs the request as protobuf.
func (r FlushRequest) Encode() []byte {
	b := make([]byte, 0, 27)
	for i, v := range []uint64{r.Offset, r.Length, r.OpContext} {
		b = append(b, byte((i+1)<<3|1))
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// DecodeFlushRequest unpacks a request.
func DecodeFlushRequest(b []byte) (FlushRequest, error) {
	f, err := fixed64s(b, 3)
	return FlushRequest{f[1], f[2], f[3]}, err
}

// EncodeFlushResponse packs a response carrying opContext.
func EncodeFlushResponse(opContext uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{1<<3 | 1}, opContext)
}

// DecodeFlushResponse unpacks a response.
func DecodeFlushResponse(b []byte) (uint64, error) {
	f, err := fixed64s(b, 1)
	return f[1], err
}

// fixed64s parses a protobuf message of fixed64 fields numbered 1..n, all required.
func fixed64s(b []byte, n int) ([4]uint64, error) {
	var f [4]uint64
	seen := 0
	for len(b) > 0 {
		num, wt := int(b[0]>>3), b[0]&7
		if wt != 1 || num < 1 || num > n || len(b) < 9 {
			return f, fmt.Errorf("malformed GPSPM message")
		}
		f[num] = binary.LittleEndian.Uint64(b[1:9])
		seen |= 1 << num
		b = b[9:]
	}
	if seen != (1<<(n+1))-2 {
		return f, fmt.Errorf("GPSPM message lacks required fields")
	}
	return f, nil
}

// Persist writes n bytes at off back to the mapped file (mem.persist of the
// C examples); DRAM needs nothing.
func (m *Mem) Persist(off, n int) error {
	if m.m != nil {
		return m.m.Sync(off, n)
	}
	return nil
}

// PmemPath is the optional <pmem-path> argument of the persistent examples
// ("" when absent: the region is then volatile memory).
func PmemPath(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}
