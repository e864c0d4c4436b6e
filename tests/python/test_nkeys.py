"""nats-py, unchanged, against semaq-server with nkey users and operator-signed JWT users: the
client signs the server's nonce with its seed (`nkeys_seed=`) or a `.creds` file
(`user_credentials=`); pub/sub then works, and wrong credentials are refused."""

import asyncio
import base64
import json
import os
import time

import nats
import nkeys
import pytest
from nats.errors import NoServersError

from conftest import Server


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=20))


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_pair(prefix):
    """A fresh key pair: its seed and its public key."""
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    pair = nkeys.from_seed(seed)
    return seed, pair.public_key.decode()


def mint(issuer_seed, subject, nats_claims, **times):
    """A JWT as nsc writes it (nats-io/jwt v2 header), signed by `issuer_seed`."""
    issuer = nkeys.from_seed(issuer_seed)
    claims = {"jti": b64(os.urandom(16)), "iat": int(time.time()) - 60, "iss": issuer.public_key.decode(),
              "name": "py", "sub": subject, "nats": nats_claims, **times}
    signed = b64(b'{"typ":"JWT","alg":"ed25519-nkey"}') + "." + b64(json.dumps(claims).encode())
    return signed + "." + b64(issuer.sign(signed.encode()))


def account_claims():
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
              "conn": -1, "leaf": -1}
    return {"type": "account", "version": 2, "limits": limits}


def user_claims():
    return {"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1, "pub": {}, "sub": {}}


def creds_file(directory, name, jwt, seed):
    path = os.path.join(directory, f"{name}.creds")
    with open(path, "w") as out:
        out.write(f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
                  f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n")
    return path


@pytest.fixture
def config_dir(tmp_path):
    return str(tmp_path)


def start(config_dir, text):
    path = os.path.join(config_dir, "server.conf")
    with open(path, "w") as out:
        out.write(text)
    return Server("-c", path)


async def round_trip(nc):
    sub = await nc.subscribe("greet.*")
    await nc.flush()
    await nc.publish("greet.py", b"hello")
    message = await sub.next_msg(timeout=5)
    assert (message.subject, message.data) == ("greet.py", b"hello")


async def refused(url, **credentials):
    with pytest.raises((NoServersError, nats.errors.Error, OSError)):
        await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2, **credentials)


def test_nkey_user_connects_with_its_seed_and_a_stranger_is_refused(config_dir):
    seed, public = new_pair(nkeys.PREFIX_BYTE_USER)
    stranger_seed, _ = new_pair(nkeys.PREFIX_BYTE_USER)
    server = start(config_dir, f"authorization {{ users [ {{ nkey: {public} }} ] }}\n")
    seed_file, stranger_file = os.path.join(config_dir, "user.nk"), os.path.join(config_dir, "stranger.nk")
    for path, content in [(seed_file, seed), (stranger_file, stranger_seed)]:
        with open(path, "wb") as out:
            out.write(content)
    try:
        async def scenario():
            nc = await nats.connect(server.url, nkeys_seed=seed_file)
            await round_trip(nc)
            await nc.close()
            await refused(server.url, nkeys_seed=stranger_file)

        run(scenario())
    finally:
        server.stop()


def test_jwt_user_connects_with_a_creds_file_and_bad_creds_are_refused(config_dir):
    operator_seed, operator = new_pair(nkeys.PREFIX_BYTE_OPERATOR)
    account_seed, account = new_pair(nkeys.PREFIX_BYTE_ACCOUNT)
    user_seed, user = new_pair(nkeys.PREFIX_BYTE_USER)
    operator_jwt = mint(operator_seed, operator, {"type": "operator", "version": 2})
    account_jwt = mint(operator_seed, account, account_claims())
    good = creds_file(config_dir, "good", mint(account_seed, user, user_claims()), user_seed)
    expired = creds_file(config_dir, "expired", mint(account_seed, user, user_claims(), exp=int(time.time()) - 5),
                         user_seed)
    stranger_seed, _ = new_pair(nkeys.PREFIX_BYTE_ACCOUNT)
    foreign = creds_file(config_dir, "foreign", mint(stranger_seed, user, user_claims()), user_seed)
    server = start(config_dir, f'operator: "{operator_jwt}"\nresolver: MEMORY\n'
                               f"resolver_preload {{\n  {account}: {account_jwt}\n}}\n")
    try:
        async def scenario():
            nc = await nats.connect(server.url, user_credentials=good)
            await round_trip(nc)
            await nc.close()
            await refused(server.url, user_credentials=expired)
            await refused(server.url, user_credentials=foreign)

        run(scenario())
    finally:
        server.stop()
