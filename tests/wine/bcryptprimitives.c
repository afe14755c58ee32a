/*
 * Test environment only: never part of the evloop library, never shipped.
 *
 * Rust's std (1.78 and later) imports ProcessPrng from bcryptprimitives.dll
 * for its random seeds (HashMap keys and the like). Wine 8.0, the Wine that
 * Debian 12 ships and that the Windows tests run under, has no
 * bcryptprimitives.dll, so every Rust program for Windows fails to start
 * under it. tests/wine/setup.sh builds this file with mingw into a DLL and
 * puts it into the test Wine prefix's system32; it forwards ProcessPrng to
 * SystemFunction036 (RtlGenRandom, in advapi32), which Wine has.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    /* SystemFunction036 takes a ULONG length: feed it in chunks. */
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
