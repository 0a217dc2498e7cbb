/* paypal_fixture.h - a PayPal secret (webhook id WH1, certificate CERT-1: self-signed RSA-2048,
 * valid 2000-2100) and one delivery signed by its key at 2023-11-14T22:13:20Z (1700000000),
 * shared by test_verify.c and fuzz_providers.c (seed_paypal is this delivery). */
#ifndef WI_TEST_PAYPAL_FIXTURE_H
#define WI_TEST_PAYPAL_FIXTURE_H

#define PAYPAL_SECRET \
    "WH1:CERT-1:" \
    "-----BEGIN CERTIFICATE-----\n" \
    "MIICnzCCAYegAwIBAgIBATANBgkqhkiG9w0BAQsFADASMRAwDgYDVQQDDAdmaXh0\n" \
    "dXJlMCAXDTAwMDEwMTAwMDAwMFoYDzIxMDAwMTAxMDAwMDAwWjASMRAwDgYDVQQD\n" \
    "DAdmaXh0dXJlMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAuTIllbpC\n" \
    "SywpjGdiskDoZC3//EBf37AcIv1idTmyOWe4Uag5uS26ualcGyF1SQCiXeu+QRM2\n" \
    "Lc9c50l0YEqNh8lA/cF8NClFRkkwP0HXzflgFUYoi5BFGqBAlHR+krQ4KpradVr0\n" \
    "HAP9mUUfY+0m2lh1VUEnPOfw9tePjzhvY/wQPe/3hvw85OaKDwblRNNvm+MdM0rq\n" \
    "JDXFEm4ieHHuftlTiN+XdDtc5/9P38FOgTly0fJZxK863xQwBmqsaId+atEoWfwx\n" \
    "1nHJX4oWWJPb7DgaGfsUnPr0GGxiU8NWPLRbGa2qkYOnDSokDeQkAGSmyYTKmEoJ\n" \
    "4esITU63Ud1SBwIDAQABMA0GCSqGSIb3DQEBCwUAA4IBAQAEzBk6XceB50tT8omw\n" \
    "dq3BYah+2y+svboJXPPlJEPhkQfepn8GGmIhlNG91L178BNbSrQdW3E0FrT4DS6W\n" \
    "iijdCPl5oG0gZK3/LalURDOJA6usODxc7SkJAM+bo+s43JsoCxnenEzy9Ku7VZom\n" \
    "CyMJIusSzMLKoWjACwkl3B8qC4RSnkjnhrzh6GyLJNitZzQydaXk3ERxm9+gNM6e\n" \
    "hnFsqY2cVJx0vc5vuUGdsrzchgNUozOntTZJaHdwBG15HqG6QEyCLyb8yRtbOjcD\n" \
    "JeUV+X0/a3nDhXDP4FskkE/sgtc8xQptMg3N7O0SePqnYRibya5pmiCHcrAIsP9e\n" \
    "gLQq\n" \
    "-----END CERTIFICATE-----"
#define PAYPAL_BODY "{\"id\":\"WH-1\",\"event_type\":\"PAYMENT.CAPTURE.COMPLETED\"}"
#define PAYPAL_ID "t1"
#define PAYPAL_TIME "2023-11-14T22:13:20Z"
#define PAYPAL_SIG "ioOQn/Rs7y0r0J8TMAXQIlZ0+pq99UtacbVdCXXuRRdwHoMurzyjazIKRUP0O1U09JBDqi+po8v0RS3AWQXpXRFa7bQNqXGe+RHcJibzaAa0jWN17YEJ2i9QO6cCbxfkOTII377d0Jd0ynvOck7+FNw1AzDa361scrMpX66/6G/X3rEbp91zXbPftPyO0SoJuYOXx+1PNFFz1ccvrKIWbwwA39HWAoPbquTKPTvuKbSL++VCahLGcKdgRuCNN+FidxMTuSJKlX+2EeGB29UTk07R+R8mCb2EEV/S9xe6/E7skfi9AoJihF46dn3JDK3bBudIlViFGZpflmB+QTo/0g=="
#define PAYPAL_CERT_URL "https://api.paypal.com/v1/notifications/certs/CERT-1"

#endif
