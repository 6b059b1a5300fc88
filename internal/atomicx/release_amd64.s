//go:build amd64 && !race

#include "textflag.h"

// func Release64(p *uint64, v uint64)
TEXT ·Release64(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func Release32(p *uint32, v uint32)
TEXT ·Release32(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET
