/* Test infrastructure, not product code: a stand-in bcryptprimitives.dll for Wine 8.
 *
 * Rust's standard library (1.78 and later) gets its random numbers (HashMap seeds) from
 * bcryptprimitives!ProcessPrng, which every supported Windows (10 and later) has. Wine 8.0, the
 * version Debian 12 ships, does not export it, so without this DLL any Rust .exe fails to start
 * under that Wine ("unimplemented function bcryptprimitives.dll.ProcessPrng"). tests/heavy/windows_wine.rs
 * builds this file with x86_64-w64-mingw32-gcc and puts the DLL beside wstune.exe (the loader
 * looks in the application's directory first); wstune.exe itself is not changed. ProcessPrng
 * forwards to RtlGenRandom (advapi32!SystemFunction036), which Wine does implement. Newer Wine
 * (9.x) has ProcessPrng and does not need this.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* BOOL ProcessPrng(PBYTE pbData, SIZE_T cbData): always TRUE on Windows; RtlGenRandom takes a
 * ULONG length, so longer requests are served in pieces. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
